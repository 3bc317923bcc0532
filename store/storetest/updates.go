package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// updateTests cover PendingIDs and UpdateMessages, the dispatcher's reads
// and writes of many messages at once.
var updateTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"PendingIDs", testPendingIDs},
	{"UpdateMessages", testUpdateMessages},
	{"UpdateMessagesFreesQueue", testUpdateMessagesFreesQueue},
}

func testPendingIDs(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	must(t, s.CreateMessage(ctx, msg(101, "app", "dev-1", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(102, "app", "dev-2", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(103, "app", "dev-1", store.StateFailed), 0, nil))
	must(t, s.CreateMessage(ctx, msg(104, "app", "dev-1", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(105, "app", "dev-1", store.StatePending), 0, nil))
	for _, tc := range []struct {
		app, dev string
		limit    int
		want     []int64
	}{
		{"app", "dev-1", 10, []int64{101, 104, 105}},
		{"app", "dev-1", 2, []int64{101, 104}},
		{"app", "dev-1", 0, nil},
		{"app", "dev-2", 10, []int64{102}},
		{"app", "ghost", 10, nil},
		{"other", "dev-1", 10, nil},
	} {
		got, err := s.PendingIDs(ctx, tc.app, tc.dev, tc.limit)
		must(t, err)
		if !slices.Equal(got, tc.want) {
			t.Fatalf("PendingIDs(%s, %s, %d) = %v, want %v", tc.app, tc.dev, tc.limit, got, tc.want)
		}
	}
	// Every write that changes the queue shows in the next read, also
	// after a read that found the same queue (a backend may keep it).
	step := func(what string, want []int64) {
		t.Helper()
		if got, err := s.PendingIDs(ctx, "app", "dev-1", 10); err != nil || !slices.Equal(got, want) {
			t.Fatalf("after %s: %v %v, want %v", what, got, err, want)
		}
		if got, _ := s.PendingIDs(ctx, "app", "dev-1", 1); !slices.Equal(got, want[:min(1, len(want))]) {
			t.Fatalf("after %s, limit 1: %v", what, got)
		}
	}
	_, err := s.UpdateMessage(ctx, "app", 104, deliver)
	must(t, err)
	step("a delivery", []int64{101, 105})
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 101, Fn: deliver}})
	must(t, err)
	must(t, errors.Join(errs...))
	step("a delivery of UpdateMessages", []int64{105})
	must(t, s.CreateMessage(ctx, msg(106, "app", "dev-1", store.StatePending), 0, nil))
	step("a send", []int64{105, 106})
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: msg(107, "app", "dev-1", store.StatePending)}}, nil, nil)
	must(t, err)
	step("a batch send", []int64{105, 106, 107})
	for _, id := range []int64{105, 106, 107} {
		_, err := s.UpdateMessage(ctx, "app", id, deliver)
		must(t, err)
	}
	step("the queue emptied", nil)
	must(t, s.CreateMessage(ctx, msg(108, "app", "dev-1", store.StatePending), 0, nil))
	step("a send to an empty queue", []int64{108})
	_, err = s.UpdateMessage(ctx, "app", 108, func(m *store.Message) error { m.State = store.StateFailed; return nil })
	must(t, err)
	must(t, s.DeleteDevice(ctx, "app", "dev-1"))
	mustDevices(t, s, "app", "dev-1")
	must(t, s.CreateMessage(ctx, msg(109, "app", "dev-1", store.StatePending), 0, nil))
	step("the device deleted and made again", []int64{109})
}

func testUpdateMessages(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	mustDevices(t, s, "app2", "dev-1")
	for id := int64(1); id <= 3; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	must(t, s.CreateMessage(ctx, msg(4, "app", "dev-2", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(5, "app2", "dev-1", store.StatePending), 0, nil))
	errFn := errors.New("fn says no")
	click := func(m *store.Message) error {
		m.Records = append(m.Records, store.Record{Type: store.RecordClick, SentTime: 3})
		return nil
	}
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{
		{AppKey: "app", ID: 1, Fn: deliver},
		{AppKey: "app", ID: 4, Fn: deliver},
		{AppKey: "app", ID: 77, Fn: deliver},
		{AppKey: "other", ID: 1, Fn: deliver},
		{AppKey: "app", ID: 1, Fn: deliver}, // sees the first update's result
		{AppKey: "app", ID: 2, Fn: func(m *store.Message) error { m.State = store.StateDelivered; return errFn }},
		{AppKey: "app", ID: 3, Fn: click},
		{AppKey: "app", ID: 3, Fn: click},
		{AppKey: "app2", ID: 5, Fn: deliver},
	})
	must(t, err)
	want := []error{nil, nil, store.ErrNotFound, store.ErrNotFound, errRefuse, errFn, nil, nil, nil}
	if len(errs) != len(want) {
		t.Fatalf("%d errors for %d updates", len(errs), len(want))
	}
	for i := range want {
		if !errors.Is(errs[i], want[i]) {
			t.Fatalf("update %d: %v, want %v", i, errs[i], want[i])
		}
	}
	for _, c := range []struct {
		app   string
		id    int64
		state string
		types []int
	}{
		{"app", 1, store.StateDelivered, []int{0, 4}},
		{"app", 2, store.StatePending, []int{0}},
		{"app", 3, store.StatePending, []int{0, 6, 6}},
		{"app", 4, store.StateDelivered, []int{0, 4}},
		{"app2", 5, store.StateDelivered, []int{0, 4}},
	} {
		m, err := s.GetMessage(ctx, c.app, c.id)
		must(t, err)
		var types []int
		for _, r := range m.Records {
			types = append(types, r.Type)
		}
		if m.State != c.state || !slices.Equal(types, c.types) {
			t.Fatalf("message %d: %s %v, want %s %v", c.id, m.State, types, c.state, c.types)
		}
	}
	if err := checkPending(s, "app", "dev-1", 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "app", "dev-2"); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "app2", "dev-1"); err != nil {
		t.Fatal(err)
	}
	// Delivered messages leave the expiry index too.
	exp, err := s.ExpiredMessages(ctx, 1000, 100)
	must(t, err)
	var expired []int64
	for _, m := range exp {
		expired = append(expired, m.ID)
	}
	if slices.Sort(expired); !slices.Equal(expired, []int64{2, 3}) {
		t.Fatalf("expiry index holds %v, want [2 3]", expired)
	}
	// Every record added is in the outbox once, the refused ones not.
	out, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	var ids []string
	for _, e := range out {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	if want := []string{"1-0", "1-1", "2-0", "3-0", "3-1", "3-2", "4-0", "4-1", "5-0", "5-1"}; !slices.Equal(ids, want) {
		t.Fatalf("outbox %v, want %v", ids, want)
	}
	if errs, err := s.UpdateMessages(ctx, nil); err != nil || len(errs) != 0 {
		t.Fatalf("no updates: %v %v", errs, err)
	}
}

// testUpdateMessagesFreesQueue checks that messages leaving the queue in
// one call free as many slots.
func testUpdateMessagesFreesQueue(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	for id := int64(1); id <= store.MaxPending; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 7, Fn: deliver}, {AppKey: "app", ID: 9, Fn: deliver}})
	must(t, err)
	must(t, errors.Join(errs...))
	must(t, s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(5001, "app", "dev-1", store.StatePending), 0, nil))
	wantErr(t, "full again", s.CreateMessage(ctx, msg(5002, "app", "dev-1", store.StatePending), 0, nil), store.ErrQueueFull)
}
