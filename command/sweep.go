package command

import (
	"context"
	"errors"
	"time"

	"github.com/devmsg/devmsg/store"
)

// sweepEvery is how often Run looks for commands due; with
// store.CmdExpiryGrace a command ends within about three seconds of its
// ttl or answer deadline.
const sweepEvery = time.Second

const sweepBatch = 512

// Run ends, until ctx is done, the commands whose ttl passed before
// delivery (expired) and those whose answer did not come in time
// (timed_out), on the server's clock.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("end commands due", "err", err)
		}
	}
}

// Sweep ends every command due now; see Run.
func (s *Service) Sweep(ctx context.Context) error {
	for {
		now := s.now().UnixMilli()
		due, err := s.store.DueCommands(ctx, now, sweepBatch)
		if err != nil {
			return err
		}
		ended := 0
		for _, c := range due {
			if _, err := s.update(ctx, c.AppKey, c.ID, func(c *store.Command, now int64) bool {
				switch {
				case c.Undelivered() && c.Due() <= now:
					s.finish(c, store.CmdExpired, 0, nil, "ttl passed before the device took the command", now)
				case c.Open() && !c.Undelivered() && c.Deadline <= now:
					s.finish(c, store.CmdTimedOut, 0, nil, "no answer within the timeout", now)
				default:
					return false
				}
				ended++
				return true
			}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if len(due) < sweepBatch || ended == 0 {
			return nil
		}
	}
}
