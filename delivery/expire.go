package delivery

import (
	"context"
	"time"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// Start runs the expiry sweeper until Stop.
func (d *Dispatcher) Start() {
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d.done)
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				if err := d.ExpireDue(context.Background()); err != nil {
					d.log.Error("expire messages", "err", err)
				}
			}
		}
	}()
}

// Stop ends the sweeper.
func (d *Dispatcher) Stop() {
	if d.stop != nil {
		close(d.stop)
		<-d.done
	}
}

// ExpireDue moves every pending message more than ExpiryGrace past its
// expire_time to expired, with record 5 (3005).
func (d *Dispatcher) ExpireDue(ctx context.Context) error {
	for {
		now := d.now()
		msgs, err := d.store.ExpiredMessages(ctx, now.Add(-ExpiryGrace).Unix(), sweepBatch)
		if err != nil {
			return err
		}
		// An expired message sent but not acknowledged frees its place in
		// the window: once the batch is recorded, each device's next
		// messages go, not at some later wake-up.
		devs := map[[2]string]bool{}
		for _, m := range msgs {
			if err := d.fail(ctx, m, store.StateExpired, message.ErrCodeTTLExpired, "ttl expired"); err != nil {
				return err
			}
			d.expired.Add(1)
			devs[[2]string{m.AppKey, m.DeviceName}] = true
		}
		for k := range devs {
			d.Wake(k[0], k[1])
		}
		if len(msgs) < sweepBatch {
			return nil
		}
	}
}

// FailPending moves every pending message of the device to failed with
// record 5 and the given code: 3003 when it is disabled, 3007 deleted.
func (d *Dispatcher) FailPending(ctx context.Context, app, dev string, code int, reason string) error {
	return message.FailPending(ctx, d.store, app, dev, code, reason, d.now())
}

func (d *Dispatcher) fail(ctx context.Context, m store.Message, state string, code int, reason string) error {
	return message.Fail(ctx, d.store, m, state, code, reason, d.now())
}
