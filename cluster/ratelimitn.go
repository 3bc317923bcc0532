package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// AllowN takes n tokens from key's bucket at once, or none; when they are
// not all there it returns how long until they are. A batch send takes
// one token per message this way, all or none (docs/api.md, "Send to many
// devices").
func (r *RateLimiter) AllowN(ctx context.Context, key string, n, perSecond int) (bool, time.Duration, error) {
	res, err := r.lim.AllowN(ctx, r.prefix+key, redis_rate.PerSecond(perSecond), n)
	if err != nil {
		return false, 0, fmt.Errorf("rate limit: %w", err)
	}
	return res.Allowed > 0, res.RetryAfter, nil
}
