package pebble

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestAckWriteAllocations counts the heap allocations of a PUBACK batch
// (UpdateMessages marking 512 cached messages of 16 devices delivered)
// per message. Allocation was a tenth of the server's CPU in fan-out; the
// ack write now allocates per message only its new value and its
// records' copy, the rest once per batch.
func TestAckWriteAllocations(t *testing.T) {
	const n, devs = 512, 16
	var names []string
	for d := range devs {
		names = append(names, fmt.Sprintf("dev-%d", d))
	}
	s, must := openTestApp(t, names...)
	s.msgs.noVerify = true // the checks read Pebble and allocate
	ctx := context.Background()
	var msgs []store.BatchMessage
	var ups []store.MessageUpdate
	deliver := func(m *store.Message) error {
		m.State = store.StateDelivered
		m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: 1})
		return nil
	}
	for i := range int64(n) {
		msgs = append(msgs, store.BatchMessage{Message: store.Message{ID: i + 1, DeviceName: names[i%devs], Body: "b", TTL: 60,
			ExpireTime: 1 << 40, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}})
		ups = append(ups, store.MessageUpdate{AppKey: "app", ID: i + 1, Fn: deliver})
	}
	_, err := s.CreateMessages(ctx, "app", msgs, nil, nil)
	must(err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	errs, err := s.UpdateMessages(ctx, ups)
	runtime.ReadMemStats(&after)
	must(err)
	must(errors.Join(errs...))
	per := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.2f allocations per message", per)
	if per > 3 {
		t.Errorf("%.2f allocations per acknowledged message, want at most 3", per)
	}
}
