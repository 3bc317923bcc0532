package pebble

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestUpdateMessagesPlansOutsideStripes checks that UpdateMessages runs
// the updates (and encodes their result) before it takes the devices'
// stripes, which a batch send to a thousand devices needs all of, and
// that a message changed between that and the stripes is updated again
// from what is stored then.
func TestUpdateMessagesPlansOutsideStripes(t *testing.T) {
	s, must := openTestApp(t, "dev-1")
	ctx := context.Background()
	must(s.CreateMessage(ctx, store.Message{ID: 1, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
		ExpireTime: 1 << 40, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}, 0, nil))
	stripe := &s.locks[deviceStripe("app", "dev-1")]
	var calls, unlocked int
	deliver := func(m *store.Message) error {
		calls++
		if stripe.TryLock() {
			stripe.Unlock()
			unlocked++
		}
		if calls == 1 && unlocked == 1 {
			// A click stored while the ack write is being prepared
			// (under the stripe this would deadlock).
			_, err := s.UpdateMessage(ctx, "app", 1, func(m *store.Message) error {
				m.Records = append(m.Records, store.Record{Type: store.RecordClick})
				return nil
			})
			must(err)
		}
		m.State = store.StateDelivered
		m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess})
		return nil
	}
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 1, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	if unlocked == 0 {
		t.Fatal("the update ran only under the device's stripe")
	}
	if calls != 2 {
		t.Fatalf("the update ran %d times, want twice: once more for the message changed meanwhile", calls)
	}
	m, err := s.GetMessage(ctx, "app", 1)
	must(err)
	var types []int
	for _, r := range m.Records {
		types = append(types, r.Type)
	}
	if m.State != store.StateDelivered || !slices.Equal(types, []int{store.RecordTargetValid, store.RecordClick, store.RecordDeliverySuccess}) {
		t.Fatalf("stored %s %v, want delivered with the click kept", m.State, types)
	}
	if ids, _ := s.PendingIDs(ctx, "app", "dev-1", 10); len(ids) != 0 {
		t.Fatalf("queue %v after delivery", ids)
	}
	if n, _ := s.pending.get("app", "dev-1"); n != 0 {
		t.Fatalf("pending count %d after delivery", n)
	}
}
