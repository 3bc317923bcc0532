package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

var errRefuse = errors.New("refused by fn")

// deliver moves a pending message to delivered with record 4.
func deliver(m *store.Message) error {
	if m.State != store.StatePending {
		return errRefuse
	}
	m.State = store.StateDelivered
	m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: 2})
	return nil
}

func testUpdateMessage(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	for id := int64(1); id <= 3; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	m, err := s.UpdateMessage(ctx, "app", 2, deliver)
	must(t, err)
	if m.State != store.StateDelivered || len(m.Records) != 2 || m.DeviceName != "dev-1" {
		t.Fatalf("returned %+v", m)
	}
	if err := checkPending(s, "app", "dev-1", 1, 3); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMessage(ctx, "app", 2)
	must(t, err)
	if got.State != store.StateDelivered || len(got.Records) != 2 || got.Records[1].Type != store.RecordDeliverySuccess {
		t.Fatalf("stored %+v", got)
	}
	// A non-pending message gains records and keeps its state.
	_, err = s.UpdateMessage(ctx, "app", 2, func(m *store.Message) error {
		m.Records = append(m.Records, store.Record{Type: store.RecordClick, SentTime: 3})
		return nil
	})
	must(t, err)
	if got, _ := s.GetMessage(ctx, "app", 2); got.State != store.StateDelivered || len(got.Records) != 3 {
		t.Fatalf("after click %+v", got)
	}
	// fn's error is returned and nothing is written.
	_, err = s.UpdateMessage(ctx, "app", 2, deliver)
	wantErr(t, "fn error", err, errRefuse)
	// Records are only appended, and nothing becomes pending again.
	_, err = s.UpdateMessage(ctx, "app", 2, func(m *store.Message) error { m.Records = m.Records[:1]; return nil })
	if err == nil {
		t.Fatal("removing records was accepted")
	}
	_, err = s.UpdateMessage(ctx, "app", 2, func(m *store.Message) error { m.State = store.StatePending; return nil })
	if err == nil {
		t.Fatal("a delivered message became pending again")
	}
	if err := checkPending(s, "app", "dev-1", 1, 3); err != nil {
		t.Fatal(err)
	}
	// Scoped to the app; unknown ids are not found.
	_, err = s.UpdateMessage(ctx, "other", 1, deliver)
	wantErr(t, "another app's message", err, store.ErrNotFound)
	_, err = s.UpdateMessage(ctx, "app", 77, deliver)
	wantErr(t, "missing message", err, store.ErrNotFound)
	// Identity fields cannot be changed by fn.
	m, err = s.UpdateMessage(ctx, "app", 1, func(m *store.Message) error {
		m.AppKey, m.DeviceName, m.ID = "x", "y", 9
		m.State = store.StateRetracted
		m.Records = append(m.Records, store.Record{Type: store.RecordRetractSuccess})
		return nil
	})
	must(t, err)
	if got, err := s.GetMessage(ctx, "app", 1); err != nil || got.DeviceName != "dev-1" || got.State != store.StateRetracted || m.ID != 1 {
		t.Fatalf("identity changed: %+v %v", got, err)
	}
	if err := checkPending(s, "app", "dev-1", 3); err != nil {
		t.Fatal(err)
	}
}

// testUpdateMessageFreesQueue checks that leaving the queue frees a slot.
func testUpdateMessageFreesQueue(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	for id := int64(1); id <= store.MaxPending; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	wantErr(t, "full queue", s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StatePending), 0, nil), store.ErrQueueFull)
	_, err := s.UpdateMessage(ctx, "app", 7, deliver)
	must(t, err)
	must(t, s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StatePending), 0, nil))
	wantErr(t, "full again", s.CreateMessage(ctx, msg(5001, "app", "dev-1", store.StatePending), 0, nil), store.ErrQueueFull)
}

func testConcurrentUpdateMessage(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	must(t, s.CreateMessage(ctx, msg(1, "app", "dev-1", store.StatePending), 0, nil))
	counts := race(t, 16, func(int) error {
		_, err := s.UpdateMessage(ctx, "app", 1, deliver)
		return err
	}, errRefuse)
	if counts["ok"] != 1 {
		t.Fatalf("outcomes %v, want exactly one delivery", counts)
	}
	if got, _ := s.GetMessage(ctx, "app", 1); len(got.Records) != 2 {
		t.Fatalf("records %+v", got.Records)
	}
}

func testExpiredMessages(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	mk := func(id, expire int64, dev, state string) {
		m := msg(id, "app", dev, state)
		m.ExpireTime = expire
		must(t, s.CreateMessage(ctx, m, 0, nil))
	}
	mk(1, 100, "dev-1", store.StatePending)
	mk(2, 50, "dev-2", store.StatePending)
	mk(3, 100, "dev-2", store.StatePending)
	mk(4, 200, "dev-1", store.StatePending)
	mk(5, 10, "dev-1", store.StateFailed) // not queued, never expires
	idsOf := func(ms []store.Message) []int64 {
		var out []int64
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	for _, tc := range []struct {
		before int64
		limit  int
		want   []int64
	}{
		{50, 10, nil},
		{51, 10, []int64{2}},
		{101, 10, []int64{2, 1, 3}},
		{101, 2, []int64{2, 1}},
		{1000, 10, []int64{2, 1, 3, 4}},
	} {
		got, err := s.ExpiredMessages(ctx, tc.before, tc.limit)
		must(t, err)
		if !slices.Equal(idsOf(got), tc.want) {
			t.Errorf("before %d limit %d: %v, want %v", tc.before, tc.limit, idsOf(got), tc.want)
		}
	}
	_, err := s.UpdateMessage(ctx, "app", 2, deliver)
	must(t, err)
	if got, _ := s.ExpiredMessages(ctx, 1000, 10); !slices.Equal(idsOf(got), []int64{1, 3, 4}) {
		t.Errorf("after delivering 2: %v", idsOf(got))
	}
}

// testCreateMessageNoDevice: a pending message for a device that does
// not exist (deleted since the caller looked) is refused.
func testCreateMessageNoDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	if err := s.CreateMessage(ctx, msg(1, "app", "ghost", store.StatePending), 0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pending message for a missing device: %v, want ErrNotFound", err)
	}
	must(t, s.DeleteDevice(ctx, "app", "dev-1"))
	if err := s.CreateMessage(ctx, msg(2, "app", "dev-1", store.StatePending), 0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pending message for a deleted device: %v, want ErrNotFound", err)
	}
}

func testOutbox(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	m := msg(1, "app", "dev-1", store.StatePending)
	m.CallbackURL, m.Params = "https://example.com/cb", json.RawMessage(`{"k":1}`)
	m.Records = []store.Record{{Type: store.RecordTargetValid, SentTime: 1}, {Type: store.RecordSubmitSuccess, SentTime: 1}}
	must(t, s.CreateMessage(ctx, m, 0, nil))
	must(t, s.CreateMessage(ctx, msg(2, "app", "dev-1", store.StateFailed), 0, nil))
	_, err := s.UpdateMessage(ctx, "app", 1, deliver)
	must(t, err)
	_, _ = s.UpdateMessage(ctx, "app", 1, deliver) // refused: writes nothing
	got, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	var desc []string
	for i, e := range got {
		desc = append(desc, fmt.Sprintf("%s:%d", e.ID, e.Type))
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Errorf("outbox not in Seq order: %+v", got)
		}
	}
	if want := []string{"1-0:0", "1-1:2", "2-0:0", "1-2:4"}; !slices.Equal(desc, want) {
		t.Fatalf("outbox %v, want %v", desc, want)
	}
	if h := got[3]; h.AppKey != "app" || h.CallbackURL != "https://example.com/cb" || h.Time == 0 {
		t.Fatalf("head of 1-2: %+v", h)
	}
	checkOutboxPages(t, s, got)
	checkRouteNowhere(t, s, got)
	checkRoutedAsStored(t, s, got[3])
}

// checkRoutedAsStored routes h, the delivery record of message 1, to a
// queue and checks the entry there carries what its callback needs;
// a second route of it, gone from the outbox, does nothing.
func checkRoutedAsStored(t *testing.T, s store.Store, h store.OutboxHead) {
	t.Helper()
	ctx := context.Background()
	q := store.CallbackQueue{AppKey: "app", URL: "https://example.com/cb"}
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: h, URL: q.URL}}))
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: h, URL: q.URL + "2"}}))
	got, err := s.ReadCallbacks(ctx, q, 0, 10)
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("queue: %+v", got)
	}
	if e := got[0]; e.Seq != h.Seq || e.ID != "1-2" || e.AppKey != "app" || e.CallbackURL != "https://example.com/cb" || e.Time != h.Time ||
		e.Record.Type != store.RecordDeliverySuccess || e.Record.ChannelKey != "app" || e.Record.MsgID != "1" ||
		e.Record.UserID != "dev-1" || e.Record.SenderID != "dev-1" || string(e.Record.Params) != `{"k":1}` {
		t.Fatalf("entry not filled in: %+v", e)
	}
	if qs, err := s.CallbackQueues(ctx); err != nil || len(qs) != 1 || qs[0] != q {
		t.Fatalf("a second route of a routed entry: queues %v %v", qs, err)
	}
}

// checkOutboxPages reads testOutbox's outbox, whose entries are got, a
// page at a time (with a limit, and after a Seq), and checks the last
// entry has a time.
func checkOutboxPages(t *testing.T, s store.Store, got []store.OutboxHead) {
	t.Helper()
	ctx := context.Background()
	if first, _ := s.ReadOutbox(ctx, 0, 2); len(first) != 2 || first[0].ID != "1-0" {
		t.Fatalf("limit 2: %+v", first)
	}
	if after, _ := s.ReadOutbox(ctx, got[1].Seq, 100); len(after) != 2 || after[0].ID != "2-0" || after[1].ID != "1-2" {
		t.Fatalf("after Seq %d: %+v", got[1].Seq, after)
	}
	if e := got[3]; e.Time == 0 {
		t.Fatalf("entry without a time: %+v", e)
	}
}

// checkRouteNowhere routes two of testOutbox's entries got to no URL:
// they leave the outbox and go to no queue.
func checkRouteNowhere(t *testing.T, s store.Store, got []store.OutboxHead) {
	t.Helper()
	ctx := context.Background()
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: got[0]}, {Entry: got[2]}}))
	rest, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	if len(rest) != 2 || rest[0].ID != "1-1" || rest[1].ID != "1-2" {
		t.Fatalf("after routing two nowhere: %+v", rest)
	}
	if qs, err := s.CallbackQueues(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("routed nowhere, yet queues %v %v", qs, err)
	}
}

// testRouteRuns routes a run of consecutive entries, one of them to a
// queue and the rest nowhere, in one call: exactly those leave the outbox.
func testRouteRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	for i := int64(1); i <= 6; i++ {
		must(t, s.CreateMessage(ctx, msg(i, "app", "dev-1", store.StateFailed), 0, nil))
	}
	got, err := s.ReadOutbox(ctx, 0, 10)
	must(t, err)
	if len(got) != 6 {
		t.Fatalf("outbox %+v", got)
	}
	q := store.CallbackQueue{AppKey: "app", URL: "http://a.example/cb"}
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: got[1]}, {Entry: got[2]}, {Entry: got[3], URL: q.URL}, {Entry: got[4]}}))
	rest, err := s.ReadOutbox(ctx, 0, 10)
	must(t, err)
	if len(rest) != 2 || rest[0] != got[0] || rest[1] != got[5] {
		t.Fatalf("left after routing the middle four: %+v", rest)
	}
	if queued, _ := s.ReadCallbacks(ctx, q, 0, 10); len(queued) != 1 || queued[0].Head() != got[3] {
		t.Fatalf("queued %+v, want %+v", queued, got[3])
	}
}

// testCallbackQueues routes outbox entries into per-URL queues, reads and
// deletes them, files a dead letter and redelivers it.
func testCallbackQueues(t *testing.T, s store.Store) {
	out, q := routeThreeQueues(t, s)
	checkReadDeleteCallbacks(t, s, q.a, out[0])
	checkMoveCallbacks(t, s, q.o, out)
	d := checkFileDeadLetter(t, s, q.b, out[1])
	checkRedeliverDeadLetter(t, s, q.b, d, out)
}

// threeQueues are the queues routeThreeQueues fills: a and b are two URLs
// of one app, o the same URL as a for another app.
type threeQueues struct{ a, b, o store.CallbackQueue }

// routeThreeQueues writes three failed messages, routes their outbox
// entries one to each of three queues, and checks the outbox is empty and
// the queues are listed.
func routeThreeQueues(t *testing.T, s store.Store) ([]store.OutboxEntry, threeQueues) {
	t.Helper()
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	mustDevices(t, s, "other", "dev-1")
	for i := int64(1); i <= 3; i++ {
		m := msg(i, "app", "dev-1", store.StateFailed)
		if i == 3 {
			m.AppKey = "other"
		}
		must(t, s.CreateMessage(ctx, m, 0, nil))
	}
	out, err := s.ReadOutbox(ctx, 0, 10)
	must(t, err)
	if len(out) != 3 {
		t.Fatalf("outbox %+v", out)
	}
	a := store.CallbackQueue{AppKey: "app", URL: "http://a.example/cb"}
	b := store.CallbackQueue{AppKey: "app", URL: "http://b.example/cb?x=1"}
	o := store.CallbackQueue{AppKey: "other", URL: "http://a.example/cb"}
	must(t, s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: out[0], URL: a.URL}, {Entry: out[1], URL: b.URL}, {Entry: out[2], URL: o.URL}}))
	if rest, _ := s.ReadOutbox(ctx, 0, 10); len(rest) != 0 {
		t.Fatalf("outbox after routing: %+v", rest)
	}
	qs, err := s.CallbackQueues(ctx)
	must(t, err)
	if !slices.Equal(qs, []store.CallbackQueue{a, b, o}) {
		t.Fatalf("queues %+v", qs)
	}
	var entries []store.OutboxEntry
	for _, q := range qs {
		got, err := s.ReadCallbacks(ctx, q, 0, 10)
		must(t, err)
		entries = append(entries, got...)
	}
	for i, e := range entries {
		if len(entries) != 3 || e.Head() != out[i] {
			t.Fatalf("queued %+v, routed %+v", entries, out)
		}
	}
	return entries, threeQueues{a, b, o}
}

// checkReadDeleteCallbacks reads queue a, whose only entry is want, and
// deletes it.
func checkReadDeleteCallbacks(t *testing.T, s store.Store, a store.CallbackQueue, want store.OutboxEntry) {
	t.Helper()
	ctx := context.Background()
	got, err := s.ReadCallbacks(ctx, a, 0, 10)
	must(t, err)
	if len(got) != 1 || got[0].ID != want.ID || got[0].Seq != want.Seq || got[0].Record.Type != want.Record.Type {
		t.Fatalf("queue a: %+v, want %+v", got, want)
	}
	if after, _ := s.ReadCallbacks(ctx, a, want.Seq, 10); len(after) != 0 {
		t.Fatalf("queue a after its only entry: %+v", after)
	}
	must(t, s.DeleteCallbacks(ctx, a, []int64{want.Seq, 1 << 40}))
	if got, _ := s.ReadCallbacks(ctx, a, 0, 10); len(got) != 0 {
		t.Fatalf("queue a after delete: %+v", got)
	}
}

// checkMoveCallbacks moves queue o's entry, out[2], to another URL of its
// app, where it gets a new Seq.
func checkMoveCallbacks(t *testing.T, s store.Store, o store.CallbackQueue, out []store.OutboxEntry) {
	t.Helper()
	ctx := context.Background()
	moved := store.CallbackQueue{AppKey: "other", URL: "http://c.example/cb"}
	must(t, s.MoveCallbacks(ctx, o, out[2:3], moved.URL))
	if got, _ := s.ReadCallbacks(ctx, o, 0, 10); len(got) != 0 {
		t.Fatalf("queue o after the move: %+v", got)
	}
	if got, _ := s.ReadCallbacks(ctx, moved, 0, 10); len(got) != 1 || got[0].ID != out[2].ID || got[0].Seq <= out[2].Seq {
		t.Fatalf("moved queue: %+v, want %s with a new Seq", got, out[2].ID)
	}
}

// checkFileDeadLetter files queue b's entry e as a dead letter, atomically
// with leaving the queue, and checks it is listed for its app only.
func checkFileDeadLetter(t *testing.T, s store.Store, b store.CallbackQueue, e store.OutboxEntry) store.DeadLetter {
	t.Helper()
	ctx := context.Background()
	d := store.DeadLetter{ID: fmt.Sprint(e.Seq), AppKey: "app", URL: b.URL, Entries: []store.OutboxEntry{e}, Attempts: 4, LastError: "HTTP 500", Time: 7}
	must(t, s.PutDeadLetter(ctx, d))
	if err := s.PutDeadLetter(ctx, d); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("a second dead letter with id %s: %v, want ErrAlreadyExists", d.ID, err)
	}
	if got, _ := s.ReadCallbacks(ctx, b, 0, 10); len(got) != 0 {
		t.Fatalf("queue b after dead letter: %+v", got)
	}
	list, err := s.ListDeadLetters(ctx, "app", "", 10)
	must(t, err)
	if len(list) != 1 || list[0].ID != d.ID || list[0].LastError != "HTTP 500" || len(list[0].Entries) != 1 {
		t.Fatalf("dead letters %+v", list)
	}
	if other, _ := s.ListDeadLetters(ctx, "other", "", 10); len(other) != 0 {
		t.Fatalf("another app sees dead letters: %+v", other)
	}
	if page, _ := s.ListDeadLetters(ctx, "app", d.ID, 10); len(page) != 0 {
		t.Fatalf("after the cursor: %+v", page)
	}
	return d
}

// checkRedeliverDeadLetter redelivers dead letter d, once and from its own
// app only, back into queue b with a Seq newer than any of out's.
func checkRedeliverDeadLetter(t *testing.T, s store.Store, b store.CallbackQueue, d store.DeadLetter, out []store.OutboxEntry) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.RedeliverDeadLetter(ctx, "other", d.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redeliver from another app: %v, want ErrNotFound", err)
	}
	if _, err := s.RedeliverDeadLetter(ctx, "app", d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeliverDeadLetter(ctx, "app", d.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second redeliver: %v, want ErrNotFound", err)
	}
	back, err := s.ReadCallbacks(ctx, b, 0, 10)
	must(t, err)
	if len(back) != 1 || back[0].ID != out[1].ID || back[0].Seq <= out[2].Seq {
		t.Fatalf("redelivered %+v: want id %s with a new Seq", back, out[1].ID)
	}
	if list, _ := s.ListDeadLetters(ctx, "app", "", 10); len(list) != 0 {
		t.Fatalf("dead letters after redelivery: %+v", list)
	}
}

func testReportProperties(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 0, nil)
	must(t, err)
	rep := func(version int64, props, sdk, appVer string) (store.Shadow, error) {
		var p map[string]json.RawMessage
		_ = json.Unmarshal([]byte(props), &p)
		return s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "dev-1", Version: version, Properties: p, SDKVer: sdk, AppVer: appVer, Time: 1000 + version})
	}
	sh, err := rep(0, `{"a":2,"b":"x"}`, "s1", "a1")
	must(t, err)
	if sh.LastReportedVersion != 1 || sh.SDKVer != "s1" || sh.AppVer != "a1" || string(sh.Properties["a"].ReportedValue) != "2" ||
		string(sh.Properties["a"].DesiredValue) != "1" || string(sh.Properties["b"].ReportedValue) != `"x"` || sh.Properties["b"].ReportedSTime != 1000 {
		t.Fatalf("first report: %+v", sh)
	}
	sh, err = rep(5, `{"a":3}`, "", "")
	must(t, err)
	if sh.LastReportedVersion != 5 || sh.LastReportedSTime != 1005 || sh.SDKVer != "s1" || sh.AppVer != "a1" {
		t.Fatalf("versioned report: %+v", sh)
	}
	for _, v := range []int64{5, 4} {
		_, err = rep(v, `{"a":9}`, "s9", "")
		wantErr(t, fmt.Sprint("stale version ", v), err, store.ErrVersionConflict)
	}
	got, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if got.LastReportedVersion != 5 || string(got.Properties["a"].ReportedValue) != "3" || got.SDKVer != "s1" || got.LastDesiredVersion != 2 {
		t.Fatalf("stored after a refused report: %+v", got)
	}
	_, err = s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "ghost", Properties: map[string]json.RawMessage{"a": json.RawMessage("1")}})
	wantErr(t, "unknown device", err, store.ErrNotFound)
}

func testResetPresence(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3")
	mustDevices(t, s, "other", "dev-1")
	online := func(app, name string) {
		_, err := s.UpdateDevice(ctx, app, name, func(d *store.Device) error {
			d.Status, d.ClientIP, d.LastLoginTime = 1, "10.0.0.1", 50
			return nil
		})
		must(t, err)
	}
	online("app", "dev-1")
	online("app", "dev-3")
	online("other", "dev-1")
	_, err := s.UpdateDevice(ctx, "app", "dev-3", func(d *store.Device) error { d.Status, d.LastLogoutTime = 0, 60; return nil })
	must(t, err)
	n, err := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 100, nil)
	must(t, err)
	if n != 2 {
		t.Fatalf("reset %d devices, want 2", n)
	}
	for _, c := range []struct {
		app, name string
		logout    int64
	}{{"app", "dev-1", 100}, {"app", "dev-2", 0}, {"app", "dev-3", 60}, {"other", "dev-1", 100}} {
		d, err := s.GetDevice(ctx, c.app, c.name)
		must(t, err)
		if d.Status != 0 || d.LastLogoutTime != c.logout {
			t.Errorf("%s/%s: %+v", c.app, c.name, d)
		}
	}
	if n, _ := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 200, nil); n != 0 {
		t.Fatalf("second reset changed %d", n)
	}
	online("app", "dev-2")
	if n, _ := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 300, nil); n != 1 {
		t.Fatalf("reset after a new login changed %d", n)
	}
}

// testResetPresenceOfNode resets the devices one node holds, leaving the
// other nodes' devices and those that logged in since loginBefore.
func testResetPresenceOfNode(t *testing.T, s store.Store) {
	ctx := context.Background()
	names := []string{"a", "b", "c", "d", "e"}
	mustDevices(t, s, "app", names...)
	for i, c := range []struct {
		node  int
		login int64
	}{{1, 50}, {2, 50}, {1, 99}, {1, 100}, {3, 10}} {
		_, err := s.UpdateDevice(ctx, "app", names[i], func(d *store.Device) error {
			d.Status, d.LastLoginTime, d.Node, d.Conn = 1, c.login, c.node, "conn-"+names[i]
			return nil
		})
		must(t, err)
	}
	n, err := s.ResetPresence(ctx, 1, 100, 120, nil)
	must(t, err)
	if n != 2 {
		t.Fatalf("reset %d devices of node 1, want 2 (a and c)", n)
	}
	for i, want := range []int{0, 1, 0, 1, 1} {
		d, err := s.GetDevice(ctx, "app", names[i])
		must(t, err)
		if d.Status != want {
			t.Errorf("device %s (node %d, login %d): status %d, want %d", d.Name, d.Node, d.LastLoginTime, d.Status, want)
		}
		if want == 0 && d.LastLogoutTime != 120 {
			t.Errorf("device %s: logout %d, want 120", d.Name, d.LastLogoutTime)
		}
	}
	// Devices that stayed online are still found by a later reset.
	if n, err := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 130, nil); err != nil || n != 3 {
		t.Fatalf("reset of every node changed %d (%v), want 3", n, err)
	}
}

func testListMessages(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	mustDevices(t, s, "other", "dev-1")
	// Ids whose decimal strings sort differently from the numbers.
	ids := []int64{9, 10, 100, 1 << 40, 1<<53 - 1}
	for i, id := range ids {
		m := msg(id, "app", fmt.Sprintf("dev-%d", i%2+1), store.StatePending)
		if i == 1 {
			m.State = store.StateFailed // stored without queueing
		}
		must(t, s.CreateMessage(ctx, m, 0, nil))
	}
	must(t, s.CreateMessage(ctx, msg(50, "other", "dev-1", store.StatePending), 0, nil))
	_, err := s.UpdateMessage(ctx, "app", 100, deliver)
	must(t, err)
	must(t, s.DeleteDevice(ctx, "app", "dev-2")) // its messages stay listed

	list := func(app string, before int64, limit int) []int64 {
		t.Helper()
		ms, err := s.ListMessages(ctx, app, before, limit)
		must(t, err)
		got := []int64{}
		for _, m := range ms {
			if m.AppKey != app {
				t.Fatalf("ListMessages(%s) returned %+v", app, m)
			}
			got = append(got, m.ID)
		}
		return got
	}
	for _, c := range []struct {
		app    string
		before int64
		limit  int
		want   []int64
	}{
		{"app", 0, 10, []int64{1<<53 - 1, 1 << 40, 100, 10, 9}},
		{"app", 0, 2, []int64{1<<53 - 1, 1 << 40}},
		{"app", 1 << 40, 2, []int64{100, 10}},
		{"app", 10, 2, []int64{9}},
		{"app", 9, 2, []int64{}},
		{"app", 101, 1, []int64{100}},
		{"app", 0, 0, []int64{}},
		{"other", 0, 10, []int64{50}},
		{"nobody", 0, 10, []int64{}},
	} {
		if got := list(c.app, c.before, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("ListMessages(%s, before %d, limit %d) = %v, want %v", c.app, c.before, c.limit, got, c.want)
		}
	}
	ms, err := s.ListMessages(ctx, "app", 101, 2)
	must(t, err)
	if ms[0].State != store.StateDelivered || len(ms[0].Records) != 2 || ms[0].DeviceName != "dev-1" || ms[1].State != store.StateFailed {
		t.Fatalf("listed messages carry their current state: %+v", ms)
	}
}
