package restapi

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// Limiter holds one token bucket per key, of perSecond tokens refilled at
// perSecond a second. The rate is passed on every call, so an admin change
// applies at once. cluster.RateLimiter is one shared by every node.
type Limiter interface {
	// Allow takes a token from key's bucket; when none is there it returns
	// how long until one is.
	Allow(ctx context.Context, key string, perSecond int) (bool, time.Duration, error)
	// AllowN takes n tokens at once, or none (a batch send takes one per
	// message).
	AllowN(ctx context.Context, key string, n, perSecond int) (bool, time.Duration, error)
}

// localLimiter is a Limiter in this process's memory: a node's own.
type localLimiter struct {
	buckets sync.Map // key → *rate.Limiter
	now     func() time.Time
}

func newLocalLimiter() *localLimiter { return &localLimiter{now: time.Now} }

func (r *localLimiter) Allow(ctx context.Context, key string, perSecond int) (bool, time.Duration, error) {
	return r.AllowN(ctx, key, 1, perSecond)
}

func (r *localLimiter) AllowN(_ context.Context, key string, n, perSecond int) (bool, time.Duration, error) {
	now := r.now()
	v, ok := r.buckets.Load(key)
	if !ok {
		v, _ = r.buckets.LoadOrStore(key, rate.NewLimiter(rate.Limit(perSecond), perSecond))
	}
	lim := v.(*rate.Limiter)
	if lim.Limit() != rate.Limit(perSecond) {
		lim.SetLimitAt(now, rate.Limit(perSecond))
		lim.SetBurstAt(now, perSecond)
	}
	res := lim.ReserveN(now, n)
	if !res.OK() {
		return false, time.Second, nil // more than the bucket holds
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d, nil
	}
	return true, 0, nil
}

// limit enforces the authenticated app's rate for the category (429/2002).
func (a *API) limit(category string) gin.HandlerFunc {
	return func(c *gin.Context) {
		app := currentApp(c)
		perSecond := a.cfg.DefaultRateLimit
		if n, ok := app.RateLimits[category]; ok {
			perSecond = n
		}
		if perSecond <= 0 {
			c.Next()
			return
		}
		ok, wait, err := a.limits.Allow(c.Request.Context(), app.Key+"\x00"+category, perSecond)
		if err != nil {
			// A shared limiter that cannot be reached does not stop the
			// API: the request goes on and meets the store's own error.
			a.log.Error("rate limit", "app", app.Key, "category", category, "err", err)
			ok = true
		}
		if !ok {
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
