package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// RunReopenTests checks that what a store acknowledged is there after it
// is closed and opened again on the same dir. open must return a fresh
// store on dir; the test closes every store it opens.
func RunReopenTests(t *testing.T, open func(t *testing.T, dir string) store.Store, opts ...Option) {
	o := optionsOf(opts)
	dir := t.TempDir()
	s := open(t, dir)
	f := writeBeforeReopen(t, s)
	var job *jobReopen
	if o.skipJobs == "" {
		job = writeJobBeforeReopen(t, s)
	}
	must(t, s.Close())

	f.s = open(t, dir)
	defer f.s.Close()
	checks := []struct {
		name string
		fn   func() error
	}{
		{"app", f.checkApp},
		{"device", f.checkDevice},
		{"shadow", f.checkShadow},
		{"seq", f.checkSeq},
		{"seq still used", f.checkSeqStillUsed},
		{"pending", func() error {
			return checkPending(f.s, "k1", "dev-1", 11, 12, 13)
		}},
		{"transition and outbox", f.checkTransitionAndOutbox},
		{"expiry index", f.checkExpiryIndex},
		{"presence", f.checkPresence},
		{"deleted device", f.checkDeletedDevice},
		{"meta", f.checkMeta},
		{"events", f.checkEvents},
		// The pending count survives too: the queue still fills at exactly MaxPending.
		{"queue count", f.checkQueueCount},
		{"job", func() error { return job.check(f.s) }},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "job" && job == nil {
				t.Skip(o.skipJobs)
			}
			if err := c.fn(); err != nil {
				t.Error(err)
			}
		})
	}
}

// reopenFixture is what RunReopenTests wrote before closing the store,
// and the reopened store its checks read.
type reopenFixture struct {
	t    *testing.T
	s    store.Store  // the reopened store
	d    store.Device // dev-2 as last written
	seq  *store.SeqEntry
	cbq  store.CallbackQueue // the queue the outbox was drained into
	dead store.DeadLetter
	// events are what AppendEvents returned: one of k1, two of k2 (trimmed).
	events []store.Event
}

// writeBeforeReopen writes, in s, one of everything a store keeps: an
// app, devices, a shadow, seq entries, pending and delivered messages,
// a drained outbox, a dead letter, meta, and a deleted device that was
// online.
func writeBeforeReopen(t *testing.T, s store.Store) *reopenFixture {
	ctx := context.Background()
	// Callbacks on: a store may leave out the records of an app that
	// sends none (the Pebble store does).
	app := store.App{Key: "k1", Name: "one", MasterSecret: "m", SigningSecret: "sig",
		Callback: store.CallbackSettings{Enabled: true, URLs: []store.CallbackURL{{URL: "http://cb.example/", Default: true}}}}
	must(t, s.CreateApp(ctx, app))
	mustDevices(t, s, "k1", "dev-1", "dev-2")
	d, err := s.GetDevice(ctx, "k1", "dev-2")
	must(t, err)
	d.Status, d.ClientIP = 1, "10.0.0.2"
	must(t, replaceDevice(ctx, s, d))
	seq := &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte(`{"x":1}`), ExpiresAt: future()}
	if _, err := s.SetDesired(ctx, update("k1", "dev-1", 1, `{"p":1}`), 5, seq); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		must(t, s.CreateMessage(ctx, msg(10+i, "k1", "dev-1", store.StatePending), 5+i, seq))
	}
	must(t, s.PutSeq(ctx, "k1", -9, *seq))
	must(t, s.PutMeta(ctx, "m", []byte("v")))
	must(t, s.CreateMessage(ctx, msg(20, "k1", "dev-2", store.StatePending), 0, nil))
	if _, err := s.UpdateMessage(ctx, "k1", 20, deliver); err != nil {
		t.Fatal(err)
	}
	// Drain the outbox into a queue: Seqs must not be handed out again
	// after reopening even though the outbox is empty.
	cbq := store.CallbackQueue{AppKey: "k1", URL: "http://cb.example/"}
	all, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	var routes []store.OutboxRoute
	for _, e := range all {
		routes = append(routes, store.OutboxRoute{Entry: e, URL: cbq.URL})
	}
	must(t, s.RouteOutbox(ctx, routes))
	// A dead letter, the newest Seq of all: its id must not be handed out
	// again either.
	must(t, s.CreateMessage(ctx, msg(21, "k1", "dev-2", store.StateFailed), 0, nil))
	deadHeads, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	deadQ := store.CallbackQueue{AppKey: "k1", URL: "http://dead.example/"}
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: deadHeads[0], URL: deadQ.URL}}))
	deadEntries, err := s.ReadCallbacks(ctx, deadQ, 0, 100)
	must(t, err)
	dead := store.DeadLetter{ID: fmt.Sprint(deadEntries[0].Seq), AppKey: "k1", URL: deadQ.URL, Entries: deadEntries[:1], Attempts: 4, LastError: "HTTP 500"}
	must(t, s.PutDeadLetter(ctx, dead))
	// A deleted device that was online, with a shadow and a message: it
	// stays deleted, and out of the online index ("presence" below).
	mustDevices(t, s, "k1", "dev-3")
	gone := d
	gone.Name, gone.Secret = "dev-3", "secret-dev-3"
	must(t, replaceDevice(ctx, s, gone))
	if _, err := s.SetDesired(ctx, update("k1", "dev-3", 1, `{"p":1}`), 0, nil); err != nil {
		t.Fatal(err)
	}
	must(t, s.CreateMessage(ctx, msg(30, "k1", "dev-3", store.StateFailed), 0, nil))
	must(t, s.DeleteDevice(ctx, "k1", "dev-3", store.Event{Type: "device.deleted", Time: 9}))
	// Events: k1 keeps its log; k2's is trimmed empty, yet its ids go on
	// from where they were.
	evs, err := s.AppendEvents(ctx, []store.Event{{AppKey: "k1", DeviceName: "dev-1", Type: "device.up", Time: 10, Data: []byte(`{"x": 1}`)}, {AppKey: "k2", DeviceName: "d", Type: "device.up", Time: 1}, {AppKey: "k2", DeviceName: "d", Type: "device.up", Time: 2}})
	must(t, err)
	if n, err := s.TrimEvents(ctx, "k2", math.MaxInt64, 0); err != nil || n != 2 {
		t.Fatalf("trim events of k2: %d, %v", n, err)
	}
	return &reopenFixture{t: t, d: d, seq: seq, cbq: cbq, dead: dead, events: evs}
}

func (f *reopenFixture) checkApp() error {
	got, err := f.s.GetApp(context.Background(), "k1")
	if err == nil && got.SigningSecret != "sig" {
		err = fmt.Errorf("got %+v", got)
	}
	return err
}

func (f *reopenFixture) checkDevice() error {
	got, err := f.s.GetDevice(context.Background(), "k1", "dev-2")
	if err == nil && !reflect.DeepEqual(got, f.d) {
		err = fmt.Errorf("got %+v, want %+v", got, f.d)
	}
	return err
}

func (f *reopenFixture) checkShadow() error {
	sh, err := f.s.GetShadow(context.Background(), "k1", "dev-1")
	if err == nil && (sh.LastDesiredVersion != 2 || string(sh.Properties["p"].DesiredValue) != "1") {
		err = fmt.Errorf("got %+v", sh)
	}
	return err
}

func (f *reopenFixture) checkSeq() error {
	for _, n := range []int64{5, 6, 7, 8, -9} {
		if _, err := f.s.GetSeq(context.Background(), "k1", n); err != nil {
			return fmt.Errorf("seq %d: %w", n, err)
		}
	}
	return nil
}

func (f *reopenFixture) checkSeqStillUsed() error {
	err := f.s.PutSeq(context.Background(), "k1", 5, *f.seq)
	if !errors.Is(err, store.ErrSeqUsed) {
		return fmt.Errorf("reusing seq 5 after reopen: %v", err)
	}
	return nil
}

// checkTransitionAndOutbox checks the delivered message, its callback in
// the queue, and that neither a queued Seq nor the dead letter's is handed
// out again.
func (f *reopenFixture) checkTransitionAndOutbox() error {
	ctx, s := context.Background(), f.s
	m, err := s.GetMessage(ctx, "k1", 20)
	if err != nil || m.State != store.StateDelivered {
		return fmt.Errorf("message 20: %+v %v", m, err)
	}
	out, err := s.ReadCallbacks(ctx, f.cbq, 0, 100)
	if err != nil || len(out) == 0 || out[len(out)-1].ID != "20-1" || out[len(out)-1].Record.Type != store.RecordDeliverySuccess {
		return fmt.Errorf("callback queue %+v %v", out, err)
	}
	must(f.t, s.CreateMessage(ctx, msg(30, "k1", "dev-2", store.StateFailed), 0, nil))
	fresh, err := s.ReadOutbox(ctx, 0, 1)
	if err != nil || len(fresh) != 1 || fresh[0].Seq <= out[len(out)-1].Seq {
		return fmt.Errorf("new outbox entry %+v %v reuses a queued Seq (last %d)", fresh, err, out[len(out)-1].Seq)
	}
	if id, _ := strconv.ParseInt(f.dead.ID, 10, 64); fresh[0].Seq <= id {
		return fmt.Errorf("new outbox entry Seq %d does not exceed dead letter %s", fresh[0].Seq, f.dead.ID)
	}
	list, err := s.ListDeadLetters(ctx, "k1", "", 10)
	if err != nil || len(list) != 1 || list[0].ID != f.dead.ID || list[0].Entries[0].ID != "21-0" {
		return fmt.Errorf("dead letters %+v %v", list, err)
	}
	return nil
}

func (f *reopenFixture) checkExpiryIndex() error {
	exp, err := f.s.ExpiredMessages(context.Background(), 1<<40, 10)
	var got []int64
	for _, m := range exp {
		got = append(got, m.ID)
	}
	if err != nil || !slices.Equal(got, []int64{11, 12, 13}) {
		return fmt.Errorf("expired %v %v", got, err)
	}
	return nil
}

func (f *reopenFixture) checkPresence() error {
	n, err := f.s.ResetPresence(context.Background(), store.AllNodes, math.MaxInt64, 5, nil)
	if err == nil && n != 1 {
		err = fmt.Errorf("reset %d online devices, want 1 (dev-2)", n)
	}
	return err
}

func (f *reopenFixture) checkDeletedDevice() error {
	ctx := context.Background()
	if _, err := f.s.GetDevice(ctx, "k1", "dev-3"); !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("device: %v, want ErrNotFound", err)
	}
	if _, err := f.s.GetShadow(ctx, "k1", "dev-3"); !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("shadow: %v, want ErrNotFound", err)
	}
	_, err := f.s.GetMessage(ctx, "k1", 30)
	return err
}

func (f *reopenFixture) checkEvents() error {
	ctx := context.Background()
	p, err := f.s.ReadEvents(ctx, store.EventQuery{AppKey: "k1", Limit: 10})
	if err != nil {
		return err
	}
	if len(p.Events) != 2 || p.Events[0].Type != "device.deleted" || p.Events[0].DeviceName != "dev-3" {
		return fmt.Errorf("events of k1 %+v, want device.deleted of dev-3 then %+v", p.Events, f.events[0])
	}
	if err := sameEvent(p.Events[1], f.events[0]); err != nil {
		return err
	}
	if _, err := f.s.ReadEvents(ctx, store.EventQuery{AppKey: "k2", After: f.events[1].ID, Limit: 10}); !errors.Is(err, store.ErrEventsTrimmed) {
		return fmt.Errorf("read k2 after a trimmed id: %v, want ErrEventsTrimmed", err)
	}
	out, err := f.s.AppendEvents(ctx, []store.Event{{AppKey: "k1", Type: "t"}, {AppKey: "k2", Type: "t"}})
	if err != nil {
		return err
	}
	if out[0].ID <= f.events[0].ID || out[1].ID <= f.events[2].ID {
		return fmt.Errorf("ids after the reopen %d, %d; want above %d, %d", out[0].ID, out[1].ID, f.events[0].ID, f.events[2].ID)
	}
	return nil
}

func (f *reopenFixture) checkMeta() error {
	v, err := f.s.GetMeta(context.Background(), "m")
	if err == nil && string(v) != "v" {
		err = fmt.Errorf("got %q", v)
	}
	return err
}

func (f *reopenFixture) checkQueueCount() error {
	ctx := context.Background()
	for i := int64(4); i <= store.MaxPending; i++ {
		if err := f.s.CreateMessage(ctx, msg(10+i, "k1", "dev-1", store.StatePending), 0, nil); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	err := f.s.CreateMessage(ctx, msg(99999, "k1", "dev-1", store.StatePending), 0, nil)
	if !errors.Is(err, store.ErrQueueFull) {
		return fmt.Errorf("message %d: %v, want ErrQueueFull", store.MaxPending+1, err)
	}
	return nil
}
