package pebble_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestOutboxLeavesOutRecordsTheAppDrops: records made while the app's
// callbacks are off, have no URL, or leave out their type go nowhere, so
// they are not written to the outbox; once the settings send them, the
// next records are, with Seqs that leave no gap.
func TestOutboxLeavesOutRecordsTheAppDrops(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a", MasterSecret: "m", SigningSecret: "s"}))
	if _, err := s.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "d1", Flag: store.FlagEnabled}}); err != nil {
		t.Fatal(err)
	}
	records := []store.Record{{Type: store.RecordTargetValid, SentTime: 1}, {Type: store.RecordSubmitSuccess, SentTime: 1}}
	send := func(id int64) {
		t.Helper()
		m := store.Message{ID: id, AppKey: "app", DeviceName: "d1", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
			State: store.StatePending, Records: records}
		must(s.CreateMessage(ctx, m, 0, nil))
	}
	sendBatch := func(id int64) {
		t.Helper()
		m := store.Message{ID: id, AppKey: "app", DeviceName: "d1", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
			State: store.StatePending, Records: records}
		full := m
		full.State, full.Records = store.StateFailed, records[:1]
		_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: m, Full: full}}, nil, nil)
		must(err)
	}
	deliver := func(id int64) {
		t.Helper()
		_, err := s.UpdateMessage(ctx, "app", id, func(m *store.Message) error {
			m.State = store.StateDelivered
			m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: 2})
			return nil
		})
		must(err)
	}
	settings := func(cb store.CallbackSettings) {
		t.Helper()
		_, err := s.UpdateApp(ctx, "app", func(a *store.App) error { a.Callback = cb; return nil })
		must(err)
	}
	outbox := func() []string {
		t.Helper()
		hs, err := s.ReadOutbox(ctx, 0, 100)
		must(err)
		var out []string
		for i, h := range hs {
			if i > 0 && h.Seq != hs[i-1].Seq+1 {
				t.Errorf("outbox Seqs %d then %d: a gap", hs[i-1].Seq, h.Seq)
			}
			out = append(out, fmt.Sprintf("%s:%d", h.ID, h.Type))
		}
		return out
	}

	send(1) // switch off (the default)
	sendBatch(2)
	if got := outbox(); len(got) != 0 {
		t.Fatalf("callbacks off: outbox %v, want none", got)
	}
	url := []store.CallbackURL{{URL: "https://cb.example/", Default: true}}
	settings(store.CallbackSettings{Enabled: true}) // on, but no URL
	deliver(1)
	if got := outbox(); len(got) != 0 {
		t.Fatalf("no URL: outbox %v, want none", got)
	}
	settings(store.CallbackSettings{Enabled: true, URLs: url, Types: []int{store.RecordDeliverySuccess}})
	send(3)
	deliver(2)
	settings(store.CallbackSettings{Enabled: true, URLs: url}) // every type
	sendBatch(4)
	deliver(3)
	want := []string{"2-2:4", "4-0:0", "4-1:2", "3-2:4"}
	if got := outbox(); !slices.Equal(got, want) {
		t.Fatalf("outbox %v, want %v", got, want)
	}
	settings(store.CallbackSettings{Enabled: false, URLs: url})
	deliver(4)
	if got := outbox(); !slices.Equal(got, want) {
		t.Fatalf("switched off again: outbox %v, want %v", got, want)
	}
}
