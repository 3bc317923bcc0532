package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// Option changes how RunTests and RunReopenTests run.
type Option func(*options)

type options struct {
	skipJobs string
}

// SkipJobs skips the Jobs part of the suite, saying why: for a backend
// that does not keep jobs yet. Every other test runs.
func SkipJobs(reason string) Option { return func(o *options) { o.skipJobs = reason } }

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// RunTests runs the conformance suite. newStore returns an empty store
// that the suite may use freely; the suite does not close it, so newStore
// registers its own cleanup.
func RunTests(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	o := optionsOf(opts)
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Apps", testApps},
		{"CreateDevices", testCreateDevices},
		{"DevicesScopedToApp", testDevicesScoped},
		{"UpdateDevice", testUpdateDevice},
		{"UpdateAtomic", testUpdateAtomic},
		{"DeleteDevice", testDeleteDevice},
		{"ConcurrentDeleteDevice", testConcurrentDeleteDevice},
		{"ListDevicesPaging", testListDevicesPaging},
		{"ListDevicesPrefix", testListDevicesPrefix},
		{"CountDevices", testCountDevices},
		{"GetShadow", testGetShadow},
		{"SetDesired", testSetDesired},
		{"SetDesiredSeq", testSetDesiredSeq},
		{"Seq", testSeq},
		{"SeqExpiry", testSeqExpiry},
		{"CreateMessage", testCreateMessage},
		{"CreateMessageSeq", testCreateMessageSeq},
		{"QueueLimit", testQueueLimit},
		{"LastMessageID", testLastMessageID},
		{"ListMessages", testListMessages},
		{"Meta", testMeta},
		{"ConcurrentSetDesired", testConcurrentSetDesired},
		{"ConcurrentSetDesiredDevices", testConcurrentSetDesiredDevices},
		{"ConcurrentPutSeq", testConcurrentPutSeq},
		{"ConcurrentQueueLimit", testConcurrentQueueLimit},
		{"ConcurrentCreateDevices", testConcurrentCreateDevices},
		{"UpdateMessage", testUpdateMessage},
		{"UpdateMessageFreesQueue", testUpdateMessageFreesQueue},
		{"ConcurrentUpdateMessage", testConcurrentUpdateMessage},
		{"ExpiredMessages", testExpiredMessages},
		{"CreateMessageNoDevice", testCreateMessageNoDevice},
		{"Outbox", testOutbox},
		{"RouteRuns", testRouteRuns},
		{"CallbackQueues", testCallbackQueues},
		{"ReportProperties", testReportProperties},
		{"ResetPresence", testResetPresence},
		{"ResetPresenceOfNode", testResetPresenceOfNode},
	}
	for _, tc := range append(append(append(append(tests, eventTests...), fleetTests...), updateTests...), commandTests...) {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
	for _, tc := range jobTests {
		t.Run(tc.name, func(t *testing.T) {
			if o.skipJobs != "" {
				t.Skip(o.skipJobs)
			}
			tc.fn(t, newStore(t))
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr fails unless err is want (nil included).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func future() int64 { return time.Now().Add(time.Hour).UnixMilli() }
func past() int64   { return time.Now().Add(-time.Second).UnixMilli() }

func mustDevices(t *testing.T, s store.Store, app string, names ...string) {
	t.Helper()
	devs := make([]store.Device, len(names))
	for i, n := range names {
		devs[i] = store.Device{AppKey: app, Name: n, Secret: "secret-" + n, TimeCreate: 1}
	}
	errs, err := s.CreateDevices(context.Background(), app, devs)
	must(t, err)
	if len(errs) != len(names) {
		t.Fatalf("CreateDevices returned %d results for %d devices", len(errs), len(names))
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("create %s: %v", names[i], e)
		}
	}
}

func update(app, dev string, version int64, props string) store.DesiredUpdate {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(props), &m); err != nil {
		panic(err)
	}
	return store.DesiredUpdate{AppKey: app, DeviceName: dev, Version: version, Properties: m, Time: time.Now().UnixMilli()}
}

func msg(id int64, app, dev, state string) store.Message {
	return store.Message{
		ID: id, AppKey: app, DeviceName: dev, Body: fmt.Sprint("body ", id), TTL: 60, TimeCreate: 1, ExpireTime: 61, State: state,
		Records: []store.Record{{Type: store.RecordTargetValid, ChannelKey: app, MsgID: fmt.Sprint(id), SentTime: 1}},
	}
}

// checkPending reports whether the device's pending queue holds exactly ids, in order.
func checkPending(s store.Store, app, dev string, ids ...int64) error {
	p, err := s.PendingMessages(context.Background(), app, dev, store.MaxPending+1)
	if err != nil {
		return err
	}
	got := make([]int64, 0, len(p))
	for _, m := range p {
		if m.AppKey != app || m.DeviceName != dev || m.State != store.StatePending {
			return fmt.Errorf("queue of %s/%s holds %+v", app, dev, m)
		}
		got = append(got, m.ID)
	}
	if !slices.Equal(got, ids) {
		return fmt.Errorf("pending %v, want %v", got, ids)
	}
	return nil
}

func names(devs []store.Device) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

func testApps(t *testing.T, s store.Store) {
	ctx := context.Background()
	if apps, err := s.ListApps(ctx); err != nil || len(apps) != 0 {
		t.Fatalf("empty store lists %+v, %v", apps, err)
	}
	_, err := s.GetApp(ctx, "b")
	wantErr(t, "get missing app", err, store.ErrNotFound)
	wantErr(t, "update missing app", replaceApp(ctx, s, store.App{Key: "b"}), store.ErrNotFound)
	for _, k := range []string{"b", "a", "c", "ab", "B"} {
		must(t, s.CreateApp(ctx, store.App{Key: k, Name: "name " + k, MasterSecret: "s", CreatedAt: 7}))
	}
	wantErr(t, "create duplicate", s.CreateApp(ctx, store.App{Key: "a", Name: "again"}), store.ErrAlreadyExists)
	if got, _ := s.GetApp(ctx, "a"); got.Name != "name a" {
		t.Fatalf("a refused create overwrote the app: %+v", got)
	}
	limit := 7.5
	maxLen := 12
	app := store.App{
		Key: "a", Name: "A2", MasterSecret: "s2", SigningSecret: "sig", CreatedAt: 7,
		RateLimits: map[string]int{store.CategoryMessage: 5, store.CategoryQuery: 0},
		Properties: []store.PropertyDef{
			{Name: "t", Type: store.TypeDouble, Max: &limit},
			{Name: "s", Type: store.TypeString, MaxLength: &maxLen},
		},
	}
	must(t, replaceApp(ctx, s, app))
	got, err := s.GetApp(ctx, "a")
	must(t, err)
	if got.Name != "A2" || got.MasterSecret != "s2" || got.SigningSecret != "sig" || got.CreatedAt != 7 ||
		len(got.RateLimits) != 2 || got.RateLimits[store.CategoryMessage] != 5 ||
		len(got.Properties) != 2 || *got.Properties[0].Max != 7.5 || got.Properties[0].Min != nil || *got.Properties[1].MaxLength != 12 {
		t.Fatalf("after update: %+v", got)
	}
	apps, err := s.ListApps(ctx)
	must(t, err)
	var keys []string
	for _, a := range apps {
		keys = append(keys, a.Key)
	}
	if want := []string{"B", "a", "ab", "b", "c"}; !slices.Equal(keys, want) {
		t.Fatalf("ListApps keys %v, want %v", keys, want)
	}
}

func testCreateMessage(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	// Interleave two devices and unqueued states; msgids increase in send
	// order, as the service generates them.
	sends := []sentMessage{
		{101, "dev-1", store.StatePending},
		{102, "dev-2", store.StatePending},
		{103, "dev-1", store.StateFailed},
		{104, "dev-1", store.StatePending},
		{105, "dev-1", store.StateExpired},
		{106, "dev-2", store.StatePending},
		{107, "dev-1", store.StatePending},
		{108, "dev-1", store.StateDelivered},
	}
	for _, m := range sends {
		must(t, s.CreateMessage(ctx, msg(m.id, "app", m.dev, m.state), 0, nil))
	}
	checkSentQueues(t, s)
	checkSentMessages(t, s, sends)
	checkMessageAllFields(t, s)
	_, err := s.GetMessage(ctx, "app", 8)
	wantErr(t, "missing message", err, store.ErrNotFound)
	_, err = s.GetMessage(ctx, "other", 101)
	wantErr(t, "another app's message", err, store.ErrNotFound)
	for _, id := range []int64{0, -5, 1 << 62} {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-2", store.StateFailed), 0, nil))
		if got, err := s.GetMessage(ctx, "app", id); err != nil || got.ID != id {
			t.Fatalf("message %d: %+v %v", id, got, err)
		}
	}
}

// sentMessage is one message testCreateMessage sends: its id, device and
// state.
type sentMessage struct {
	id    int64
	dev   string
	state string
}

// checkSentQueues checks the devices' queues after testCreateMessage's
// sends: only the pending messages, in send order, within the limit asked.
func checkSentQueues(t *testing.T, s store.Store) {
	t.Helper()
	if err := checkPending(s, "app", "dev-1", 101, 104, 107); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "app", "dev-2", 102, 106); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "app", "ghost"); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 3, 4} {
		p, err := s.PendingMessages(context.Background(), "app", "dev-1", limit)
		must(t, err)
		if len(p) != min(limit, 3) || p[0].ID != 101 {
			t.Fatalf("limit %d: %d messages", limit, len(p))
		}
	}
}

// checkSentMessages reads back every message of sends, as it was sent.
func checkSentMessages(t *testing.T, s store.Store, sends []sentMessage) {
	t.Helper()
	for _, m := range sends {
		got, err := s.GetMessage(context.Background(), "app", m.id)
		must(t, err)
		want := msg(m.id, "app", m.dev, m.state)
		if got.State != want.State || got.DeviceName != m.dev || got.Body != want.Body || got.TTL != 60 || got.ExpireTime != 61 ||
			len(got.Records) != 1 || got.Records[0].MsgID != fmt.Sprint(m.id) {
			t.Fatalf("message %d: %+v", m.id, got)
		}
	}
}

// checkMessageAllFields writes a message with its optional fields and
// records filled in, and reads them back.
func checkMessageAllFields(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	full := msg(200, "app", "dev-1", store.StateFailed)
	full.CallbackURL = "https://example.com/cb"
	full.Params = json.RawMessage(`{"k":"v"}`)
	full.Records = append(full.Records, store.Record{Type: store.RecordSubmitFailure, Error: &store.RecordError{Code: 5, Message: "no"}, Params: full.Params})
	must(t, s.CreateMessage(ctx, full, 0, nil))
	got, err := s.GetMessage(ctx, "app", 200)
	must(t, err)
	if got.CallbackURL != full.CallbackURL || string(got.Params) != `{"k":"v"}` || len(got.Records) != 2 ||
		got.Records[1].Error == nil || got.Records[1].Error.Code != 5 || string(got.Records[1].Params) != `{"k":"v"}` {
		t.Fatalf("message 200: %+v", got)
	}
}

func testCreateMessageSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	seq := &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte(`{"msgid":11}`), ExpiresAt: future()}
	must(t, s.CreateMessage(ctx, msg(11, "app", "dev-1", store.StatePending), 4, seq))
	if e, err := s.GetSeq(ctx, "app", 4); err != nil || string(e.Body) != `{"msgid":11}` {
		t.Fatalf("seq entry %+v %v", e, err)
	}
	for _, state := range []string{store.StatePending, store.StateFailed} {
		err := s.CreateMessage(ctx, msg(12, "app", "dev-1", state), 4, seq)
		wantErr(t, "reused seq, "+state, err, store.ErrSeqUsed)
		_, err = s.GetMessage(ctx, "app", 12)
		wantErr(t, "a refused message was stored", err, store.ErrNotFound)
	}
	if err := checkPending(s, "app", "dev-1", 11); err != nil {
		t.Fatal(err)
	}
	_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 4, seq)
	wantErr(t, "property set with a message's seq_no", err, store.ErrSeqUsed)
	// Expired entries are replaced; a non-pending message records its seq too.
	must(t, s.PutSeq(ctx, "app", 5, store.SeqEntry{Fingerprint: "old", ExpiresAt: past()}))
	must(t, s.CreateMessage(ctx, msg(13, "app", "dev-1", store.StateFailed), 5, seq))
	if e, err := s.GetSeq(ctx, "app", 5); err != nil || e.Fingerprint != "f" {
		t.Fatalf("expired entry not replaced: %+v %v", e, err)
	}
}

func testQueueLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	want := make([]int64, 0, store.MaxPending)
	for i := 1; i <= store.MaxPending; i++ {
		must(t, s.CreateMessage(ctx, msg(int64(i), "app", "dev-1", store.StatePending), 0, nil))
		want = append(want, int64(i))
	}
	seq := &store.SeqEntry{Fingerprint: "f", ExpiresAt: future()}
	err := s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StatePending), 8, seq)
	wantErr(t, fmt.Sprint("message ", store.MaxPending+1), err, store.ErrQueueFull)
	_, err = s.GetSeq(ctx, "app", 8)
	wantErr(t, "seq recorded for a refused message", err, store.ErrNotFound)
	_, err = s.GetMessage(ctx, "app", 5000)
	wantErr(t, "refused message stored", err, store.ErrNotFound)
	if err := checkPending(s, "app", "dev-1", want...); err != nil {
		t.Fatal(err)
	}
	// A used seq_no is reported before a full queue: the retry of a send
	// that filled the queue must be replayed, not refused.
	must(t, s.PutSeq(ctx, "app", 9, *seq))
	err = s.CreateMessage(ctx, msg(5001, "app", "dev-1", store.StatePending), 9, seq)
	wantErr(t, "full queue and used seq", err, store.ErrSeqUsed)
	// Messages that are not queued, and other devices, are unaffected.
	must(t, s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StateFailed), 8, seq))
	must(t, s.CreateMessage(ctx, msg(5002, "app", "dev-2", store.StatePending), 0, nil))
	if err := checkPending(s, "app", "dev-1", want...); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.PendingMessages(ctx, "app", "dev-1", 2*store.MaxPending); len(p) != store.MaxPending {
		t.Fatalf("%d pending", len(p))
	}
}

func testMeta(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetMeta(ctx, "k")
	wantErr(t, "unset meta", err, store.ErrNotFound)
	tests := []struct{ key, value string }{
		{"k", "v1"},
		{"k", "v2"},
		{"admin_password_hash", "$2a$10$abc"},
		{"bin", "\x00\xff\x01"},
		{"empty", ""},
	}
	for _, tc := range tests {
		must(t, s.PutMeta(ctx, tc.key, []byte(tc.value)))
		if v, err := s.GetMeta(ctx, tc.key); err != nil || string(v) != tc.value {
			t.Fatalf("meta %q: %q %v, want %q", tc.key, v, err, tc.value)
		}
	}
	if v, _ := s.GetMeta(ctx, "k"); string(v) != "v2" {
		t.Fatalf("k = %q", v)
	}
	// CreateMeta: one of many concurrent creators wins, and its value stays.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.CreateMeta(ctx, "once", []byte{byte('a' + i)})
			if err == nil {
				wins.Add(1)
			} else if !errors.Is(err, store.ErrAlreadyExists) {
				t.Errorf("CreateMeta: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d concurrent CreateMeta calls won, want 1", wins.Load())
	}
	wantErr(t, "CreateMeta of a set key", s.CreateMeta(ctx, "k", []byte("v3")), store.ErrAlreadyExists)
	if v, _ := s.GetMeta(ctx, "k"); string(v) != "v2" {
		t.Fatalf("k = %q after a refused CreateMeta", v)
	}
	must(t, s.Ping(ctx))
}

func testLastMessageID(t *testing.T, s store.Store) {
	ctx := context.Background()
	if id, err := s.LastMessageID(ctx); err != nil || id != 0 {
		t.Fatalf("empty store: %d %v", id, err)
	}
	mustDevices(t, s, "app-a", "dev-1")
	mustDevices(t, s, "app-b", "dev-1")
	for _, m := range []store.Message{
		msg(1<<40, "app-a", "dev-1", store.StatePending),
		msg(1<<50, "app-b", "dev-1", store.StateFailed),
		msg(1<<45, "app-a", "dev-1", store.StatePending),
	} {
		must(t, s.CreateMessage(ctx, m, 0, nil))
	}
	if id, err := s.LastMessageID(ctx); err != nil || id != 1<<50 {
		t.Fatalf("got %d %v, want %d across apps and states", id, err, int64(1<<50))
	}
}

// replaceDevice stores d over the existing device through UpdateDevice.
func replaceDevice(ctx context.Context, s store.Store, d store.Device) error {
	_, err := s.UpdateDevice(ctx, d.AppKey, d.Name, func(cur *store.Device) error { *cur = d; return nil })
	return err
}

// replaceApp stores app over the existing app through UpdateApp.
func replaceApp(ctx context.Context, s store.Store, app store.App) error {
	_, err := s.UpdateApp(ctx, app.Key, func(cur *store.App) error { *cur = app; return nil })
	return err
}

// testUpdateAtomic checks that updates are read-modify-write under one
// lock (none is lost) and that an error from fn writes nothing.
func testUpdateAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "app", Name: "A", MasterSecret: "m"}))
	mustDevices(t, s, "app", "dev-1")
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := s.UpdateDevice(ctx, "app", "dev-1", func(d *store.Device) error { d.LastLoginTime++; return nil }); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := s.UpdateApp(ctx, "app", func(a *store.App) error { a.CreatedAt++; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	d, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	a, err := s.GetApp(ctx, "app")
	must(t, err)
	if d.LastLoginTime != 40 || a.CreatedAt != 40 {
		t.Fatalf("after 40 concurrent increments: device %d, app %d", d.LastLoginTime, a.CreatedAt)
	}
	boom := errors.New("boom")
	_, err = s.UpdateDevice(ctx, "app", "dev-1", func(d *store.Device) error { d.Mark = "changed"; return boom })
	wantErr(t, "device fn error", err, boom)
	_, err = s.UpdateApp(ctx, "app", func(a *store.App) error { a.Name = "changed"; return boom })
	wantErr(t, "app fn error", err, boom)
	if d, _ := s.GetDevice(ctx, "app", "dev-1"); d.Mark == "changed" {
		t.Error("a failed device update was written")
	}
	if a, _ := s.GetApp(ctx, "app"); a.Name == "changed" {
		t.Error("a failed app update was written")
	}
	_, err = s.UpdateApp(ctx, "ghost", func(*store.App) error { return nil })
	wantErr(t, "update missing app", err, store.ErrNotFound)
}
