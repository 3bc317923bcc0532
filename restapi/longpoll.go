package restapi

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxLongPollsPerApp is how many long-polls one app may have
// waiting at once on a node when Config.MaxLongPollsPerApp is 0.
const DefaultMaxLongPollsPerApp = 500

// longPollRetryAfter is the Retry-After of a refused long-poll, in seconds.
const longPollRetryAfter = 1

// longPolls bounds the requests that wait (a pull with wait > 0): each
// holds a connection, so a file descriptor, for up to its wait. They are
// refused, 429/2002, past an app's cap or when the process's descriptor
// budget has no room left (Config.LongPollRoom).
type longPolls struct {
	max     int
	room    func() bool
	mu      sync.Mutex
	waiting map[string]int // by app key
	refused *prometheus.CounterVec
}

func newLongPolls(max int, room func() bool, reg prometheus.Registerer) (*longPolls, error) {
	if max == 0 {
		max = DefaultMaxLongPollsPerApp
	}
	lp := &longPolls{max: max, room: room, waiting: map[string]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devmsg_long_polls_refused_total",
			Help: "Long-polls refused with 429/2002, by reason: app_cap (the app's waiting long-polls at http.max_long_polls_per_app) or fd_budget (the process's file descriptors at their reserve).",
		}, []string{"reason"})}
	for _, r := range []string{"app_cap", "fd_budget"} {
		lp.refused.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(lp.refused); err != nil {
			return nil, err
		}
	}
	return lp, nil
}

// enter admits one long-poll of the app, or returns the 429 that refuses
// it. The caller calls leave once the wait is over.
func (lp *longPolls) enter(appKey string) (leave func(), err error) {
	if lp.room != nil && !lp.room() {
		lp.refused.WithLabelValues("fd_budget").Inc()
		return nil, &apiError{http.StatusTooManyRequests, CodeRateLimited,
			"the server has no room for more waiting requests now; retry later, or without wait", longPollRetryAfter}
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.max > 0 && lp.waiting[appKey] >= lp.max {
		lp.refused.WithLabelValues("app_cap").Inc()
		return nil, &apiError{http.StatusTooManyRequests, CodeRateLimited,
			fmt.Sprintf("too many waiting requests for this app (at most %d at once); retry later, or without wait", lp.max), longPollRetryAfter}
	}
	lp.waiting[appKey]++
	return func() {
		lp.mu.Lock()
		defer lp.mu.Unlock()
		if lp.waiting[appKey] <= 1 {
			delete(lp.waiting, appKey)
		} else {
			lp.waiting[appKey]--
		}
	}, nil
}

// enterWait admits the long-poll of the request's app (see longPolls).
func (a *API) enterWait(c *gin.Context) (leave func(), err error) {
	return a.longPolls.enter(currentApp(c).Key)
}
