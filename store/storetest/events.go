package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// eventTests are the event-log cases of RunTests.
var eventTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"EventsAppendRead", testEventsAppendRead},
	{"EventsLimit", testEventsLimit},
	{"EventsPageBytes", testEventsPageBytes},
	{"EventsFilters", testEventsFilters},
	{"EventsQueryCheck", testEventsQueryCheck},
	{"EventsTrimByAge", testEventsTrimByAge},
	{"EventsTrimByCount", testEventsTrimByCount},
	{"EventsTrimAll", testEventsTrimAll},
	{"EventsWait", testEventsWait},
	{"EventsConcurrentAppend", testEventsConcurrentAppend},
	{"EmitCreateDevices", testEmitCreateDevices},
	{"EmitUpdateDevice", testEmitUpdateDevice},
	{"EmitUpdateDeviceRetries", testEmitUpdateDeviceRetries},
	{"EmitDeleteDevice", testEmitDeleteDevice},
	{"EmitResetPresence", testEmitResetPresence},
	{"EmitReportProperties", testEmitReportProperties},
}

func ev(app, dev, typ string, t int64, data string) store.Event {
	return store.Event{AppKey: app, DeviceName: dev, Type: typ, Time: t, Data: []byte(data)}
}

func appendEvents(t *testing.T, s store.Store, evs ...store.Event) []store.Event {
	t.Helper()
	out, err := s.AppendEvents(context.Background(), evs)
	if err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	if len(out) != len(evs) {
		t.Fatalf("AppendEvents returned %d events, want %d", len(out), len(evs))
	}
	return out
}

// readAll reads q's whole log after q.After, page by page.
func readAll(t *testing.T, s store.Store, q store.EventQuery) []store.Event {
	t.Helper()
	var all []store.Event
	for range 100_000 {
		p, err := s.ReadEvents(context.Background(), q)
		if err != nil {
			t.Fatalf("ReadEvents(%+v): %v", q, err)
		}
		all = append(all, p.Events...)
		if p.Next == q.After {
			return all
		}
		if p.Next < q.After {
			t.Fatalf("ReadEvents(%+v): Next %d went back", q, p.Next)
		}
		q.After = p.Next
	}
	t.Fatal("ReadEvents never reached the end")
	return nil
}

func ids(evs []store.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// sameEvent compares what a reader gets with what was appended.
func sameEvent(got, want store.Event) error {
	if got.ID != want.ID || got.Type != want.Type || got.AppKey != want.AppKey || got.DeviceName != want.DeviceName || got.Time != want.Time || string(got.Data) != string(want.Data) {
		return fmt.Errorf("read %+v (data %s), want %+v (data %s)", got, got.Data, want, want.Data)
	}
	return nil
}

func testEventsAppendRead(t *testing.T, s store.Store) {
	ctx := context.Background()
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10})
	if err != nil || len(p.Events) != 0 || p.Next != 0 || p.Oldest != 0 || p.Newest != 0 {
		t.Fatalf("empty log: %+v, %v; want no events, Next 0, Oldest 0, Newest 0", p, err)
	}
	in, more := appendEventsOfTwoApps(t, s)
	checkReadAppEvents(t, s, in, more)
	checkReadCursor(t, s, in, more)
	checkReadAppsApart(t, s, in)
}

// appendEventsOfTwoApps appends four events of apps a and b, then one
// more of a, and checks their ids: positive and increasing per app. Data
// is kept byte for byte (spaces and all); empty Data becomes {}.
func appendEventsOfTwoApps(t *testing.T, s store.Store) (in, more []store.Event) {
	t.Helper()
	in = appendEvents(t, s,
		ev("a", "d1", "device.up", 1000, `{"topic": "up",  "x":1}`),
		ev("b", "d1", "device.up", 1001, `{"b":1}`),
		ev("a", "d2", "device.online", 1002, ``),
		ev("a", "d1", "device.event", 1003, `{"name":"n"}`),
	)
	for i := 1; i < len(in); i++ {
		if in[i].AppKey == in[0].AppKey && in[i].ID <= in[i-1].ID && in[i-1].AppKey == in[0].AppKey {
			t.Errorf("ids do not increase per app: %v", ids(in))
		}
	}
	if in[0].ID <= 0 || in[2].ID <= in[0].ID || in[3].ID <= in[2].ID || in[1].ID <= 0 {
		t.Fatalf("ids %v: want positive and increasing per app", ids(in))
	}
	more = appendEvents(t, s, ev("a", "d1", "device.up", 1004, `[1,2]`))
	if more[0].ID <= in[3].ID {
		t.Fatalf("a later append got id %d, not above %d", more[0].ID, in[3].ID)
	}
	return in, more
}

// checkReadAppEvents reads app a's events (in and more, as
// appendEventsOfTwoApps appended them): all of them, with the page's
// Next, Oldest and Newest, and the log's Newest whatever the page.
func checkReadAppEvents(t *testing.T, s store.Store, in, more []store.Event) {
	t.Helper()
	ctx := context.Background()
	want := []store.Event{in[0], in[2], in[3], more[0]}
	want[1].Data = []byte(`{}`)
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10})
	must(t, err)
	if len(p.Events) != len(want) {
		t.Fatalf("read %d events of a, want %d: %+v", len(p.Events), len(want), p.Events)
	}
	for i := range want {
		if err := sameEvent(p.Events[i], want[i]); err != nil {
			t.Error(err)
		}
	}
	if p.Next != more[0].ID || p.Oldest != in[0].ID || p.Newest != more[0].ID {
		t.Errorf("Next %d, Oldest %d, Newest %d; want %d, %d, %d", p.Next, p.Oldest, p.Newest, more[0].ID, in[0].ID, more[0].ID)
	}
	// Newest is the log's, whatever the page: a short one, a filtered one
	// that matches nothing, one after the end.
	for _, q := range []store.EventQuery{
		{AppKey: "a", Limit: 1},
		{AppKey: "a", Limit: 10, DeviceName: "nobody"},
		{AppKey: "a", After: more[0].ID, Limit: 10},
	} {
		if p, err := s.ReadEvents(ctx, q); err != nil || p.Newest != more[0].ID {
			t.Errorf("ReadEvents(%+v): Newest %d, %v; want %d", q, p.Newest, err, more[0].ID)
		}
	}
}

// checkReadCursor: the cursor is exclusive; after the last event there
// is nothing and Next stays.
func checkReadCursor(t *testing.T, s store.Store, in, more []store.Event) {
	t.Helper()
	ctx := context.Background()
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: in[2].ID, Limit: 10})
	must(t, err)
	if got := ids(p.Events); !slices.Equal(got, []int64{in[3].ID, more[0].ID}) {
		t.Errorf("after %d: ids %v, want %v", in[2].ID, got, []int64{in[3].ID, more[0].ID})
	}
	p, err = s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: more[0].ID, Limit: 10})
	if err != nil || len(p.Events) != 0 || p.Next != more[0].ID {
		t.Errorf("after the last event: %+v, %v; want none, Next %d", p, err, more[0].ID)
	}
}

// checkReadAppsApart: apps are apart (app b holds only in[1]), and what a
// reader gets is its own copy.
func checkReadAppsApart(t *testing.T, s store.Store, in []store.Event) {
	t.Helper()
	ctx := context.Background()
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "b", Limit: 10})
	must(t, err)
	if len(p.Events) != 1 || sameEvent(p.Events[0], in[1]) != nil {
		t.Errorf("app b: %+v, want only %+v", p.Events, in[1])
	}
	p.Events[0].Data[1] = 'X'
	p, _ = s.ReadEvents(ctx, store.EventQuery{AppKey: "b", Limit: 10})
	if string(p.Events[0].Data) != `{"b":1}` {
		t.Errorf("stored data changed through a reader's copy: %s", p.Events[0].Data)
	}
}

func testEventsLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []store.Event
	for i := range 25 {
		evs = append(evs, ev("a", "d", "device.up", int64(i), `{}`))
	}
	in := appendEvents(t, s, evs...)
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 10})
	must(t, err)
	if !slices.Equal(ids(p.Events), ids(in[:10])) || p.Next != in[9].ID {
		t.Fatalf("first page: ids %v Next %d; want %v Next %d", ids(p.Events), p.Next, ids(in[:10]), in[9].ID)
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 7}); !slices.Equal(ids(got), ids(in)) {
		t.Errorf("paging by 7: %v, want %v", ids(got), ids(in))
	}
}

// bigData is a JSON string event Data of exactly n bytes.
func bigData(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }

// testEventsPageBytes: a read stops before the Data it returns passes
// MaxEventPageBytes, yet always returns one event; Next is the last
// event returned, so paging reads everything.
func testEventsPageBytes(t *testing.T, s store.Store) {
	ctx := context.Background()
	quarter := store.MaxEventPageBytes / 4
	var evs []store.Event
	for i := range 6 {
		evs = append(evs, ev("a", "d", "device.up", int64(i), bigData(quarter)))
	}
	evs = append(evs, ev("a", "d", "device.up", 6, bigData(store.MaxEventPageBytes+1)), ev("a", "d", "device.up", 7, `{}`))
	in := appendEvents(t, s, evs...)
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 100})
	must(t, err)
	if !slices.Equal(ids(p.Events), ids(in[:4])) || p.Next != in[3].ID {
		t.Fatalf("first page: ids %v Next %d; want the 4 events of %d bytes that fill %d bytes, %v, Next %d",
			ids(p.Events), p.Next, quarter, store.MaxEventPageBytes, ids(in[:4]), in[3].ID)
	}
	// A filtered read is capped the same way.
	p, err = s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: in[3].ID, Limit: 100, Types: []string{"device.up"}})
	must(t, err)
	if !slices.Equal(ids(p.Events), ids(in[4:6])) || p.Next != in[5].ID {
		t.Fatalf("filtered page: ids %v Next %d; want %v Next %d", ids(p.Events), p.Next, ids(in[4:6]), in[5].ID)
	}
	// An event over the cap on its own is still returned, alone.
	p, err = s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: in[5].ID, Limit: 100})
	must(t, err)
	if !slices.Equal(ids(p.Events), ids(in[6:7])) || p.Next != in[6].ID || len(p.Events[0].Data) != store.MaxEventPageBytes+1 {
		t.Fatalf("after %d: ids %v Next %d; want only the big event %d", in[5].ID, ids(p.Events), p.Next, in[6].ID)
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 1000}); !slices.Equal(ids(got), ids(in)) {
		t.Errorf("paging: %v, want %v", ids(got), ids(in))
	}
}

func testEventsFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []store.Event
	for i := range 30 {
		evs = append(evs, ev("a", fmt.Sprintf("d%d", i%3), "device.up", int64(i), `{}`))
	}
	evs = append(evs, ev("a", "d1", "device.online", 30, `{}`), ev("a", "rare", "device.event", 31, `{}`))
	in := appendEvents(t, s, evs...)

	got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100, DeviceName: "d1"})
	var want []int64
	for _, e := range in {
		if e.DeviceName == "d1" {
			want = append(want, e.ID)
		}
	}
	if !slices.Equal(ids(got), want) {
		t.Errorf("device d1: %v, want %v", ids(got), want)
	}
	got = readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100, Types: []string{"device.online", "device.event"}})
	if !slices.Equal(ids(got), ids(in[30:])) {
		t.Errorf("types online, event: %v, want %v", ids(got), ids(in[30:]))
	}
	got = readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100, Types: []string{"device.up"}, DeviceName: "d1"})
	if len(got) != 10 {
		t.Errorf("device.up of d1: %d events, want 10", len(got))
	}

	// A filtered read examines 10 x Limit events and moves Next past them
	// even when none matches, so that a reader always progresses.
	p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 1, DeviceName: "rare"})
	must(t, err)
	if len(p.Events) != 0 || p.Next != in[9].ID {
		t.Errorf("filtered read, limit 1: %d events, Next %d; want none, Next %d (the 10th examined)", len(p.Events), p.Next, in[9].ID)
	}
	p, err = s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 1, DeviceName: "rare", After: in[29].ID})
	must(t, err)
	if len(p.Events) != 1 || p.Events[0].ID != in[31].ID || p.Next != in[31].ID {
		t.Errorf("filtered read near the end: %+v, want only %d", p, in[31].ID)
	}
	// An unfiltered read examines Limit events.
	p, err = s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 3})
	must(t, err)
	if len(p.Events) != 3 || p.Next != in[2].ID {
		t.Errorf("unfiltered limit 3: %d events, Next %d", len(p.Events), p.Next)
	}
}

func testEventsQueryCheck(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, q := range []store.EventQuery{
		{AppKey: "a", Limit: 0},
		{AppKey: "a", Limit: store.MaxEventLimit + 1},
		{AppKey: "a", Limit: 1, After: -1},
		{Limit: 1},
	} {
		if _, err := s.ReadEvents(ctx, q); err == nil {
			t.Errorf("ReadEvents(%+v): no error", q)
		}
	}
}

// trimmedAt reads a after the cursor and wants ErrEventsTrimmed with
// Oldest set, or no error.
func checkTrimmed(t *testing.T, s store.Store, after, oldest int64, trimmed bool) {
	t.Helper()
	p, err := s.ReadEvents(context.Background(), store.EventQuery{AppKey: "a", After: after, Limit: 10})
	if trimmed {
		if !errors.Is(err, store.ErrEventsTrimmed) || p.Oldest != oldest {
			t.Errorf("read after %d: %v, Oldest %d; want ErrEventsTrimmed, Oldest %d", after, err, p.Oldest, oldest)
		}
		return
	}
	if err != nil || p.Oldest != oldest {
		t.Errorf("read after %d: %v, Oldest %d; want no error, Oldest %d", after, err, p.Oldest, oldest)
	}
}

func testEventsTrimByAge(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []store.Event
	for i := range 10 {
		evs = append(evs, ev("a", "d", "device.up", 1000+int64(i), `{}`))
	}
	in := appendEvents(t, s, evs...)
	other := appendEvents(t, s, ev("b", "d", "device.up", 1, `{}`))
	n, err := s.TrimEvents(ctx, "a", 1004, 0)
	if err != nil || n != 4 {
		t.Fatalf("TrimEvents before 1004: %d, %v; want 4", n, err)
	}
	if n, err := s.TrimEvents(ctx, "a", 1004, 0); err != nil || n != 0 {
		t.Errorf("TrimEvents again: %d, %v; want 0", n, err)
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100}); !slices.Equal(ids(got), ids(in[4:])) {
		t.Errorf("after the trim: %v, want %v", ids(got), ids(in[4:]))
	}
	// A cursor below the last trimmed id lost events; one at it did not.
	checkTrimmed(t, s, in[0].ID, in[4].ID, true)
	checkTrimmed(t, s, in[2].ID, in[4].ID, true)
	checkTrimmed(t, s, in[3].ID, in[4].ID, false)
	checkTrimmed(t, s, in[5].ID, in[4].ID, false)
	checkTrimmed(t, s, 0, in[4].ID, false)
	// The age trim stops at the first event not old enough.
	late := appendEvents(t, s, ev("a", "d", "device.up", 10, `{}`))
	if n, err := s.TrimEvents(ctx, "a", 1005, 0); err != nil || n != 1 {
		t.Errorf("TrimEvents before 1005: %d, %v; want 1 (the event with time 10 is behind a newer one)", n, err)
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100}); len(got) != 6 || got[5].ID != late[0].ID {
		t.Errorf("after the second trim: %v", ids(got))
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "b", Limit: 100}); len(got) != 1 || got[0].ID != other[0].ID {
		t.Errorf("another app's log changed: %v", ids(got))
	}
}

func testEventsTrimByCount(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []store.Event
	for i := range 10 {
		evs = append(evs, ev("a", "d", "device.up", 1000+int64(i), `{}`))
	}
	in := appendEvents(t, s, evs...)
	if n, err := s.TrimEvents(ctx, "a", 0, 20); err != nil || n != 0 {
		t.Errorf("TrimEvents max 20: %d, %v; want 0", n, err)
	}
	if n, err := s.TrimEvents(ctx, "a", 0, 7); err != nil || n != 3 {
		t.Fatalf("TrimEvents max 7: %d, %v; want 3", n, err)
	}
	// Age and count together: 2 by age, then down to 3.
	if n, err := s.TrimEvents(ctx, "a", 1005, 3); err != nil || n != 4 {
		t.Fatalf("TrimEvents before 1005, max 3: %d, %v; want 4", n, err)
	}
	if got := readAll(t, s, store.EventQuery{AppKey: "a", Limit: 100}); !slices.Equal(ids(got), ids(in[7:])) {
		t.Errorf("after the trims: %v, want %v", ids(got), ids(in[7:]))
	}
	checkTrimmed(t, s, in[5].ID, in[7].ID, true)
	checkTrimmed(t, s, in[6].ID, in[7].ID, false)
	if n, err := s.TrimEvents(ctx, "nobody", math.MaxInt64, 1); err != nil || n != 0 {
		t.Errorf("TrimEvents of an empty log: %d, %v", n, err)
	}
}

func testEventsTrimAll(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := appendEvents(t, s, ev("a", "d", "device.up", -1, `{}`), ev("a", "d", "device.up", 2, `{}`))
	// olderThan 0 and max 0 bound nothing, whatever the events' times.
	if n, err := s.TrimEvents(ctx, "a", 0, 0); err != nil || n != 0 {
		t.Fatalf("TrimEvents(0, 0): %d, %v; want 0", n, err)
	}
	if n, err := s.TrimEvents(ctx, "a", math.MaxInt64, 0); err != nil || n != 2 {
		t.Fatalf("TrimEvents all: %d, %v; want 2", n, err)
	}
	checkTrimmed(t, s, in[0].ID, 0, true)
	checkTrimmed(t, s, in[1].ID, 0, false)
	// The newest id outlives the events: a cursor above it is one no read
	// returned, and the reader can tell.
	for _, after := range []int64{0, in[1].ID, in[1].ID + 1} {
		if p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: after, Limit: 10}); err != nil || p.Newest != in[1].ID {
			t.Errorf("emptied log, after %d: Newest %d, %v; want %d", after, p.Newest, err, in[1].ID)
		}
	}
	if p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: in[0].ID, Limit: 10}); p.Newest != in[1].ID {
		t.Errorf("trimmed cursor: Newest %d (%v), want %d", p.Newest, err, in[1].ID)
	}
	// Ids keep increasing after an emptied log.
	next := appendEvents(t, s, ev("a", "d", "device.up", 3, `{}`))
	if next[0].ID <= in[1].ID {
		t.Errorf("after trimming all, an append got id %d, not above %d", next[0].ID, in[1].ID)
	}
	checkTrimmed(t, s, in[1].ID, next[0].ID, false)
	checkTrimmed(t, s, in[0].ID, next[0].ID, true)
}

func testEventsWait(t *testing.T, s store.Store) {
	ctx := context.Background()
	in := appendEvents(t, s, ev("a", "d", "device.up", 1, `{}`))
	// At once when the log holds a later event.
	if err := s.WaitEvents(ctx, "a", 0); err != nil {
		t.Fatalf("WaitEvents after 0: %v", err)
	}
	// Until ctx is done when it does not. (A spurious return is allowed,
	// such as a notification of the append above that reaches the waiter
	// late on Redis Cluster, but not every time.)
	var err error
	for range 3 {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err = s.WaitEvents(short, "a", in[0].ID)
		cancel()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvents with nothing new: %v, want context.DeadlineExceeded", err)
	}
	// Woken by an append, whether AppendEvents or an emitting write.
	mustDevices(t, s, "a", "dev")
	for _, write := range []func() error{
		func() error {
			_, err := s.AppendEvents(ctx, []store.Event{ev("a", "d", "device.up", 2, `{}`)})
			return err
		},
		func() error {
			_, err := s.UpdateDevice(ctx, "a", "dev", func(d *store.Device) error {
				d.Emit = []store.Event{{Type: "device.enabled"}}
				return nil
			})
			return err
		},
	} {
		p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", Limit: 100})
		must(t, err)
		last := p.Next
		woke := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		go func() { woke <- s.WaitEvents(wctx, "a", last) }()
		// Let the waiter block first (a spurious early return is allowed,
		// so this only makes the test meaningful, not pass).
		time.Sleep(30 * time.Millisecond)
		// Events of another app do not count, but may wake the waiter.
		appendEvents(t, s, ev("b", "d", "device.up", 2, `{}`))
		must(t, write())
		for {
			if err := <-woke; err != nil {
				cancel()
				t.Fatalf("WaitEvents during an append: %v", err)
			}
			p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: last, Limit: 100})
			must(t, err)
			if len(p.Events) > 0 {
				break
			}
			go func() { woke <- s.WaitEvents(wctx, "a", last) }()
		}
		cancel()
	}
}

// testEventsConcurrentAppend: many appenders and a reader that follows
// the log with its cursor. Events become visible in id order, so the
// reader, never looking back, still reads every event appended.
func testEventsConcurrentAppend(t *testing.T, s store.Store) {
	ctx := context.Background()
	const appenders, rounds = 16, 30
	var mu sync.Mutex
	var appended []int64
	var wg sync.WaitGroup
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				evs := []store.Event{ev("a", fmt.Sprintf("d%d", w), "device.up", int64(r), `{}`)}
				if r%3 == 0 {
					evs = append(evs, ev("a", fmt.Sprintf("d%d", w), "device.event", int64(r), `{}`))
				}
				out, err := s.AppendEvents(ctx, evs)
				if err != nil {
					t.Error(err)
					return
				}
				if out[len(out)-1].ID <= out[0].ID && len(out) > 1 {
					t.Errorf("one append's ids not increasing: %v", ids(out))
				}
				mu.Lock()
				appended = append(appended, ids(out)...)
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	var seen []int64
	after := int64(0)
	perDevice := map[string]int64{}
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "a", After: after, Limit: 50})
		must(t, err)
		for _, e := range p.Events {
			if e.ID <= after {
				t.Fatalf("read id %d after cursor %d", e.ID, after)
			}
			if e.Time < perDevice[e.DeviceName] {
				t.Errorf("device %s: event of round %d after one of round %d", e.DeviceName, e.Time, perDevice[e.DeviceName])
			}
			perDevice[e.DeviceName] = e.Time
			seen = append(seen, e.ID)
			after = e.ID
		}
		if finished && len(p.Events) == 0 {
			break
		}
	}
	slices.Sort(appended)
	if !slices.Equal(seen, appended) {
		t.Errorf("the reader saw %d events, %d were appended: a gap was filled behind its cursor", len(seen), len(appended))
	}
}

// eventTypes lists the types of evs.
func eventTypes(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type + "/" + e.DeviceName
	}
	return out
}

func allEvents(t *testing.T, s store.Store, app string) []store.Event {
	t.Helper()
	return readAll(t, s, store.EventQuery{AppKey: app, Limit: 1000})
}

func testEmitCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "old")
	res, err := s.CreateDevices(ctx, "a", []store.Device{
		{Name: "n1", Emit: []store.Event{{Type: "device.created", Time: 5, Data: []byte(`{}`)}}},
		{Name: "old", Emit: []store.Event{{Type: "device.created"}}},
		{Name: "n2", Emit: []store.Event{{Type: "device.created"}, {Type: "device.disabled"}}},
	})
	must(t, err)
	if res[0] != nil || !errors.Is(res[1], store.ErrAlreadyExists) || res[2] != nil {
		t.Fatalf("CreateDevices results %v", res)
	}
	got := allEvents(t, s, "a")
	want := []string{"device.created/n1", "device.created/n2", "device.disabled/n2"}
	if !slices.Equal(eventTypes(got), want) {
		t.Fatalf("events %v, want %v (none for the device that existed)", eventTypes(got), want)
	}
	if got[0].AppKey != "a" || got[0].Time != 5 {
		t.Errorf("event %+v: want app a, time 5", got[0])
	}
	d, err := s.GetDevice(ctx, "a", "n1")
	must(t, err)
	if d.Emit != nil {
		t.Errorf("stored device has Emit %v", d.Emit)
	}
}

func testEmitUpdateDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d")
	_, err := s.UpdateDevice(ctx, "a", "d", func(d *store.Device) error {
		d.Emit = []store.Event{{Type: "device.disabled"}}
		d.Flag = store.FlagDisabled
		return errors.New("refused")
	})
	if err == nil || err.Error() != "refused" {
		t.Fatalf("UpdateDevice with a failing fn: %v", err)
	}
	if got := allEvents(t, s, "a"); len(got) != 0 {
		t.Fatalf("a failed update appended %v", eventTypes(got))
	}
	d, err := s.UpdateDevice(ctx, "a", "d", func(d *store.Device) error {
		if d.Emit != nil {
			return fmt.Errorf("fn called with Emit %v", d.Emit)
		}
		d.Emit = []store.Event{{Type: "device.disabled", Time: 7}}
		d.Flag = store.FlagDisabled
		return nil
	})
	must(t, err)
	got := allEvents(t, s, "a")
	if !slices.Equal(eventTypes(got), []string{"device.disabled/d"}) || got[0].Time != 7 {
		t.Fatalf("events %+v, want one device.disabled of d", got)
	}
	if again, _ := s.GetDevice(ctx, "a", "d"); again.Emit != nil || again.Flag != store.FlagDisabled {
		t.Errorf("stored device %+v", again)
	}
	_ = d
	if _, err := s.UpdateDevice(ctx, "a", "missing", func(d *store.Device) error {
		d.Emit = []store.Event{{Type: "x"}}
		return nil
	}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateDevice of a missing device: %v", err)
	}
	if got := allEvents(t, s, "a"); len(got) != 1 {
		t.Errorf("events after updating a missing device: %v", eventTypes(got))
	}
}

// testEmitUpdateDeviceRetries: concurrent updates of one device, each
// adding one event to whatever Emit fn is given. A backend that retries
// fn (optimistic locking) clears Emit before each call, so each update
// appends exactly one event.
func testEmitUpdateDeviceRetries(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d")
	const writers, each = 8, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.UpdateDevice(ctx, "a", "d", func(d *store.Device) error {
					d.TimeActive++
					d.Emit = append(d.Emit, store.Event{Type: "device.online"})
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	d, err := s.GetDevice(ctx, "a", "d")
	must(t, err)
	if got := allEvents(t, s, "a"); len(got) != writers*each || d.TimeActive != writers*each {
		t.Errorf("%d updates appended %d events (TimeActive %d)", writers*each, len(got), d.TimeActive)
	}
}

func testEmitDeleteDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d")
	if err := s.DeleteDevice(ctx, "a", "missing", store.Event{Type: "device.deleted"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteDevice of a missing device: %v", err)
	}
	if got := allEvents(t, s, "a"); len(got) != 0 {
		t.Fatalf("a failed delete appended %v", eventTypes(got))
	}
	must(t, s.DeleteDevice(ctx, "a", "d", store.Event{Type: "device.offline", Data: []byte(`{"reason":"kicked"}`)}, store.Event{Type: "device.deleted"}))
	got := allEvents(t, s, "a")
	if !slices.Equal(eventTypes(got), []string{"device.offline/d", "device.deleted/d"}) || string(got[0].Data) != `{"reason":"kicked"}` {
		t.Errorf("events %+v", got)
	}
	// Without events, as before.
	mustDevices(t, s, "a", "e")
	must(t, s.DeleteDevice(ctx, "a", "e"))
	if got := allEvents(t, s, "a"); len(got) != 2 {
		t.Errorf("a delete without events appended some: %v", eventTypes(got))
	}
}

func testEmitResetPresence(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "on1", "on2", "off", "fresh")
	for _, c := range []struct {
		name   string
		status int
		login  int64
		node   int
	}{{"on1", 1, 10, 1}, {"on2", 1, 20, 2}, {"off", 0, 10, 1}, {"fresh", 1, 500, 1}} {
		must(t, replaceDevice(ctx, s, store.Device{AppKey: "a", Name: c.name, Status: c.status, LastLoginTime: c.login, Node: c.node, ClientIP: "10.0.0.1"}))
	}
	var mu sync.Mutex
	var called []string
	offline := func(d store.Device) []store.Event {
		mu.Lock()
		defer mu.Unlock()
		called = append(called, d.Name)
		if d.Status != 1 || d.LastLogoutTime != 0 {
			t.Errorf("offline called with %+v, want the device before the reset", d)
		}
		return []store.Event{{Type: "device.offline", Data: []byte(`{"client_ip":"` + d.ClientIP + `"}`)}}
	}
	n, err := s.ResetPresence(ctx, 1, 100, 200, offline)
	if err != nil || n != 1 {
		t.Fatalf("ResetPresence of node 1: %d, %v; want 1", n, err)
	}
	n, err = s.ResetPresence(ctx, store.AllNodes, 100, 200, offline)
	if err != nil || n != 1 {
		t.Fatalf("ResetPresence of all nodes: %d, %v; want 1", n, err)
	}
	if !slices.Equal(called, []string{"on1", "on2"}) {
		t.Errorf("offline called for %v, want on1 then on2", called)
	}
	got := allEvents(t, s, "a")
	if !slices.Equal(eventTypes(got), []string{"device.offline/on1", "device.offline/on2"}) || string(got[0].Data) != `{"client_ip":"10.0.0.1"}` {
		t.Errorf("events %+v", got)
	}
	for _, name := range []string{"on1", "on2"} {
		if d, _ := s.GetDevice(ctx, "a", name); d.Status != 0 || d.LastLogoutTime != 200 {
			t.Errorf("%s after the reset: %+v", name, d)
		}
	}
}

func testEmitReportProperties(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "a", "d")
	emit := func(sh store.Shadow) []store.Event {
		return []store.Event{{Type: "property.reported", Data: fmt.Appendf(nil, `{"version":%d,"p":%s}`, sh.LastReportedVersion, sh.Properties["p"].ReportedValue), Time: sh.LastReportedSTime}}
	}
	report := func(v int64, p string) error {
		_, err := s.ReportProperties(ctx, store.Report{AppKey: "a", DeviceName: "d", Version: v, Properties: map[string]json.RawMessage{"p": json.RawMessage(p)}, Time: 77, Emit: emit})
		return err
	}
	must(t, report(0, "1"))
	must(t, report(5, "2"))
	wantErr(t, "report of an old version", report(3, "3"), store.ErrVersionConflict)
	if _, err := s.ReportProperties(ctx, store.Report{AppKey: "a", DeviceName: "missing", Emit: emit}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("report of a missing device: %v", err)
	}
	got := allEvents(t, s, "a")
	if len(got) != 2 || string(got[0].Data) != `{"version":1,"p":1}` || string(got[1].Data) != `{"version":5,"p":2}` || got[1].Time != 77 || got[1].DeviceName != "d" {
		t.Errorf("events %+v, want versions 1 and 5 with the new values", got)
	}
}
