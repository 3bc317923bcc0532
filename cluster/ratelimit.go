package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
)

// RateLimiter keeps token buckets in Redis (GCRA, by redis_rate), so an
// app's limit holds for the whole cluster, not per node.
type RateLimiter struct {
	lim    *redis_rate.Limiter
	prefix string
}

// NewRateLimiter returns a RateLimiter whose keys start with prefix.
func NewRateLimiter(rdb goredis.UniversalClient, prefix string) *RateLimiter {
	return &RateLimiter{lim: redis_rate.NewLimiter(rdb), prefix: prefix}
}

// Allow takes a token from key's bucket, which holds perSecond tokens and
// refills at perSecond a second; when it is empty it returns how long
// until a token is there.
func (r *RateLimiter) Allow(ctx context.Context, key string, perSecond int) (bool, time.Duration, error) {
	res, err := r.lim.Allow(ctx, r.prefix+key, redis_rate.PerSecond(perSecond))
	if err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	return res.Allowed > 0, res.RetryAfter, nil
}
