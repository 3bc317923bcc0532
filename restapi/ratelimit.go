package restapi

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// rateLimits holds one token bucket per app and category. A bucket's rate
// follows the app's current setting: it is re-read on every request, so an
// admin change applies at once.
type rateLimits struct {
	def     int
	buckets sync.Map // appKey + "\x00" + category → *rate.Limiter
}

func newRateLimits(def int) *rateLimits { return &rateLimits{def: def} }

// allow takes a token for the app's category; when none is available it
// returns how long until one is.
func (r *rateLimits) allow(appKey, category string, perSecond int, now time.Time) (bool, time.Duration) {
	if perSecond <= 0 {
		return true, 0
	}
	key := appKey + "\x00" + category
	v, ok := r.buckets.Load(key)
	if !ok {
		v, _ = r.buckets.LoadOrStore(key, rate.NewLimiter(rate.Limit(perSecond), perSecond))
	}
	lim := v.(*rate.Limiter)
	if lim.Limit() != rate.Limit(perSecond) {
		lim.SetLimitAt(now, rate.Limit(perSecond))
		lim.SetBurstAt(now, perSecond)
	}
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// limit enforces the authenticated app's rate for the category (429/2002).
func (a *API) limit(category string) gin.HandlerFunc {
	return func(c *gin.Context) {
		app := currentApp(c)
		perSecond := a.limits.def
		if n, ok := app.RateLimits[category]; ok {
			perSecond = n
		}
		if ok, wait := a.limits.allow(app.Key, category, perSecond, a.now()); !ok {
			a.writeError(c, &apiError{
				status:     http.StatusTooManyRequests,
				code:       CodeRateLimited,
				message:    "API call frequency exceeds the app's limit of " + strconv.Itoa(perSecond) + " " + category + " requests per second",
				retryAfter: int(math.Ceil(wait.Seconds())),
			})
			return
		}
		c.Next()
	}
}
