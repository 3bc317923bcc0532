package message

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/devmsg/devmsg/store"
)

// Disabling a device writes its flag and then fails its pending messages
// (mqttapi.API.Disabled, delivery.Dispatcher.FailPending). A send reads
// the flag before it stores its message, so a message stored after the
// device was read enabled but after that sweep read the queue would stay
// pending on a disabled device, and reach it if it were enabled again
// within the TTL. The outside tester found 26 of 10,000 devices disabled
// during a broadcast left so.
//
// Deleting a device is the same: the device goes, then its pending
// messages fail (3007).
//
// settleDisabled closes both: after the write it reads the devices again
// and fails, as the sweep would, each pending message whose device
// (sentTo[i] for msgs[i]) is disabled (3003) or gone (3007) now; a device
// created again under the name since (a later time_create) counts as
// gone. A flag written before this read is seen here; one
// written after it is followed by a sweep that sees the message. It
// returns which of msgs it failed (or found no longer pending), so that
// they are not announced to the dispatcher.
func (s *Service) settleDisabled(ctx context.Context, app string, msgs []store.Message, sentTo []store.Device, read func(names []string) ([]store.Device, error)) ([]bool, error) {
	names := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if m.State == store.StatePending {
			names = append(names, m.DeviceName)
		}
	}
	settled := make([]bool, len(msgs))
	if len(names) == 0 {
		return settled, nil
	}
	devs, err := read(names)
	if err != nil {
		return settled, fmt.Errorf("read the flags again: %w", err)
	}
	now := make(map[string]store.Device, len(devs))
	for _, d := range devs {
		now[d.Name] = d
	}
	for i, m := range msgs {
		if m.State != store.StatePending {
			continue
		}
		d, found := now[m.DeviceName]
		var code int
		var reason string
		switch {
		case !found || d.TimeCreate != sentTo[i].TimeCreate:
			// Gone, or created again under the name: the new device
			// starts with an empty queue.
			code, reason = ErrCodeDeviceDeleted, "device deleted"
		case d.Flag == store.FlagDisabled:
			code, reason = ErrCodeDeviceDisabled, "device disabled"
		default:
			continue
		}
		settled[i] = true
		if err := Fail(ctx, s.store, m, store.StateFailed, code, reason, s.now()); err != nil {
			return settled, err
		}
	}
	return settled, nil
}

// readEach reads names one GetDevice at a time (a single send's one
// device); a device gone meanwhile is left out.
func (s *Service) readEach(ctx context.Context, app string) func([]string) ([]store.Device, error) {
	return func(names []string) ([]store.Device, error) {
		out := make([]store.Device, 0, len(names))
		for _, n := range names {
			d, err := s.store.GetDevice(ctx, app, n)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		return out, nil
	}
}

// errSkip leaves a message as it is from inside an UpdateMessage.
var errSkip = errors.New("no change")

// Fail moves m, if still pending, to state with a delivery failure
// record (record 5) of code and reason: a message no longer pending, or
// gone, is left as it is.
func Fail(ctx context.Context, st interface {
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error)
}, m store.Message, state string, code int, reason string, now time.Time,
) error {
	_, err := st.UpdateMessage(ctx, m.AppKey, m.ID, func(m *store.Message) error {
		if m.State != store.StatePending {
			return errSkip
		}
		m.State = state
		m.Records = append(m.Records, NewRecord(*m, store.RecordDeliveryFailure, code, reason, now))
		return nil
	})
	if errors.Is(err, errSkip) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// failBatch is how many pending messages FailPending reads at a time.
const failBatch = 512

// FailPending moves every pending message of the device to failed with
// record 5 and the given code (3003 when it is disabled, 3007 deleted),
// failBatch at a time.
func FailPending(ctx context.Context, st interface {
	PendingMessages(ctx context.Context, appKey, device string, limit int) ([]store.Message, error)
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error)
}, app, dev string, code int, reason string, now time.Time,
) error {
	for {
		msgs, err := st.PendingMessages(ctx, app, dev, failBatch)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if err := Fail(ctx, st, m, store.StateFailed, code, reason, now); err != nil {
				return err
			}
		}
		if len(msgs) < failBatch {
			return nil
		}
	}
}
