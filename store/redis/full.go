package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// fullHook turns Redis's refusals to write for want of space into
// store.ErrFull: "OOM" at maxmemory (with the noeviction policy the store
// requires) and "MISCONF" when a snapshot failed to save (a full disk,
// with stop-writes-on-bgsave-error). Redis answers both at once; the
// caller gets an error that says the store is full rather than an
// internal one. Scripts' errors carry the same prefixes.
type fullHook struct{}

func (fullHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (fullHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if full := asFull(err); full != nil {
			cmd.SetErr(full)
			return full
		}
		return err
	}
}

func (fullHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if full := asFull(c.Err()); full != nil {
				c.SetErr(full)
			}
		}
		if full := asFull(err); full != nil {
			return full
		}
		return err
	}
}

// asFull wraps an OOM or MISCONF reply in store.ErrFull; nil otherwise.
func asFull(err error) error {
	if err == nil {
		return nil
	}
	if goredis.HasErrorPrefix(err, "OOM") || goredis.HasErrorPrefix(err, "MISCONF") {
		return fmt.Errorf("%w: redis refuses writes: %w", store.ErrFull, err)
	}
	return nil
}
