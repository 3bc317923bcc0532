package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// RunTests runs the conformance suite. newStore returns an empty store
// that the suite may use freely; the suite does not close it, so newStore
// registers its own cleanup.
func RunTests(t *testing.T, newStore func(t *testing.T) store.Store) {
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
	for _, tc := range append(append(append(tests, eventTests...), fleetTests...), updateTests...) {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// RunReopenTests checks that what a store acknowledged is there after it
// is closed and opened again on the same dir. open must return a fresh
// store on dir; the test closes every store it opens.
func RunReopenTests(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	dir := t.TempDir()
	s := open(t, dir)
	f := writeBeforeReopen(t, s)
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
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
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

func testCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "taken")
	tests := []struct {
		name  string
		input []store.Device
		want  []error
	}{
		{"mixed", []store.Device{
			{Name: "new-1", Secret: "a"}, {Name: "taken", Secret: "b"}, {Name: "new-2", Secret: "c"}, {Name: "new-1", Secret: "d"},
		}, []error{nil, store.ErrAlreadyExists, nil, store.ErrAlreadyExists}},
		{"all taken", []store.Device{{Name: "taken"}, {Name: "new-1"}}, []error{store.ErrAlreadyExists, store.ErrAlreadyExists}},
		{"repeat of a new name", []store.Device{{Name: "x", Secret: "1"}, {Name: "x"}, {Name: "x"}}, []error{nil, store.ErrAlreadyExists, store.ErrAlreadyExists}},
		{"empty", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs, err := s.CreateDevices(ctx, "app", tc.input)
			must(t, err)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d results, want %d", len(errs), len(tc.want))
			}
			for i := range tc.want {
				if (tc.want[i] == nil) != (errs[i] == nil) || !errors.Is(errs[i], tc.want[i]) {
					t.Errorf("result %d: %v, want %v", i, errs[i], tc.want[i])
				}
			}
		})
	}
	d, err := s.GetDevice(ctx, "app", "new-1")
	must(t, err)
	want := store.Device{AppKey: "app", Name: "new-1", Secret: "a"}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("the first new-1 wins and gets the app key: %+v, want %+v", d, want)
	}
	if d, _ := s.GetDevice(ctx, "app", "x"); d.Secret != "1" {
		t.Errorf("the first x wins: %+v", d)
	}
	if d, _ := s.GetDevice(ctx, "app", "taken"); d.Secret != "secret-taken" {
		t.Errorf("existing device overwritten: %+v", d)
	}
	for _, name := range []string{"new-1", "new-2", "x"} {
		sh, err := s.GetShadow(ctx, "app", name)
		must(t, err)
		if sh.LastDesiredVersion != 1 || sh.Properties == nil || len(sh.Properties) != 0 || sh.LastReportedVersion != 0 {
			t.Errorf("new shadow of %s: %+v, want store.NewShadow()", name, sh)
		}
	}
}

func testDevicesScoped(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app-a", "dev-1")
	_, err := s.GetDevice(ctx, "app-b", "dev-1")
	wantErr(t, "app-b gets app-a's device", err, store.ErrNotFound)
	_, err = s.GetShadow(ctx, "app-b", "dev-1")
	wantErr(t, "app-b gets app-a's shadow", err, store.ErrNotFound)
	wantErr(t, "app-b updates app-a's device", replaceDevice(ctx, s, store.Device{AppKey: "app-b", Name: "dev-1"}), store.ErrNotFound)
	_, err = s.SetDesired(ctx, update("app-b", "dev-1", 1, `{"p":1}`), 0, nil)
	wantErr(t, "app-b sets app-a's device", err, store.ErrNotFound)

	// The same name in another app is a different device.
	mustDevices(t, s, "app-b", "dev-1")
	_, err = s.SetDesired(ctx, update("app-b", "dev-1", 1, `{"p":1}`), 0, nil)
	must(t, err)
	if sh, _ := s.GetShadow(ctx, "app-a", "dev-1"); sh.LastDesiredVersion != 1 {
		t.Fatalf("app-b's update reached app-a's shadow: %+v", sh)
	}
	must(t, s.CreateMessage(ctx, msg(1, "app-a", "dev-1", store.StatePending), 0, nil))
	_, err = s.GetMessage(ctx, "app-b", 1)
	wantErr(t, "app-b reads app-a's message", err, store.ErrNotFound)
	if err := checkPending(s, "app-b", "dev-1"); err != nil {
		t.Fatalf("app-b's queue: %v", err)
	}

	// Key parts must not run together: app "app" with device "-a" is not
	// app "app-a", and listing "app" shows only its own device.
	mustDevices(t, s, "app", "-a")
	page, err := s.ListDevices(ctx, "app", "", "", 10)
	must(t, err)
	if got := names(page.Devices); !slices.Equal(got, []string{"-a"}) {
		t.Fatalf("app lists %v", got)
	}
	mustDevices(t, s, "ap", "p-a")
	if page, _ := s.ListDevices(ctx, "ap", "", "", 10); len(page.Devices) != 1 {
		t.Fatalf("app ap lists %v", names(page.Devices))
	}
	// Seq numbers are per app.
	must(t, s.PutSeq(ctx, "app-a", 3, store.SeqEntry{ExpiresAt: future()}))
	must(t, s.PutSeq(ctx, "app-b", 3, store.SeqEntry{ExpiresAt: future()}))
}

func testUpdateDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantErr(t, "update missing", replaceDevice(ctx, s, store.Device{AppKey: "app", Name: "ghost"}), store.ErrNotFound)
	if _, err := s.GetDevice(ctx, "app", "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused update created the device: %v", err)
	}
	mustDevices(t, s, "app", "dev-1")
	d, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	d.Flag, d.Status, d.ClientIP, d.LastLoginTime, d.LastLogoutTime, d.TimeActive, d.Mark = store.FlagDisabled, 1, "10.0.0.1", 99, 98, 97, "m"
	must(t, replaceDevice(ctx, s, d))
	got, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("got %+v, want %+v", got, d)
	}
	// Base info updates leave the shadow alone.
	if sh, _ := s.GetShadow(ctx, "app", "dev-1"); sh.LastDesiredVersion != 1 {
		t.Fatalf("shadow after device update: %+v", sh)
	}
}

func testDeleteDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantErr(t, "delete missing", s.DeleteDevice(ctx, "app", "ghost"), store.ErrNotFound)
	fillDevicesToDelete(t, s)

	must(t, s.DeleteDevice(ctx, "app", "dev-1"))

	checkDeviceGone(t, s)
	checkOtherDevicesKept(t, s)
	checkNameFreeAgain(t, s)
}

// fillDevicesToDelete writes app/dev-1, online with a shadow and messages
// in every state, beside devices it must not take along when deleted.
func fillDevicesToDelete(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	// dev-10 shares dev-1's name as a prefix; "other" has a dev-1 of its own.
	mustDevices(t, s, "app", "dev-1", "dev-10")
	mustDevices(t, s, "other", "dev-1")
	for _, app := range []string{"app", "other"} {
		_, err := s.UpdateDevice(ctx, app, "dev-1", func(d *store.Device) error { d.Status, d.ClientIP = 1, "10.0.0.1"; return nil })
		must(t, err)
		_, err = s.SetDesired(ctx, update(app, "dev-1", 1, `{"p":1}`), 0, nil)
		must(t, err)
	}
	// Three pending (the caller normally fails them first), one delivered,
	// one not queued, and one pending for each of the other devices.
	for id := int64(1); id <= 4; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	_, err := s.UpdateMessage(ctx, "app", 4, deliver)
	must(t, err)
	must(t, s.CreateMessage(ctx, msg(5, "app", "dev-1", store.StateFailed), 0, nil))
	must(t, s.CreateMessage(ctx, msg(6, "app", "dev-10", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(7, "other", "dev-1", store.StatePending), 0, nil))
	_, err = s.GetDevice(ctx, "app", "dev-1") // now in the cache of backends that keep one
	must(t, err)
}

// checkDeviceGone checks app/dev-1 is gone after its delete: no device,
// shadow, queue or listing entry, while its messages stay readable.
func checkDeviceGone(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	_, err := s.GetDevice(ctx, "app", "dev-1")
	wantErr(t, "get deleted device", err, store.ErrNotFound)
	_, err = s.GetShadow(ctx, "app", "dev-1")
	wantErr(t, "shadow of deleted device", err, store.ErrNotFound)
	_, err = s.UpdateDevice(ctx, "app", "dev-1", func(*store.Device) error { return nil })
	wantErr(t, "update deleted device", err, store.ErrNotFound)
	_, err = s.SetDesired(ctx, update("app", "dev-1", 2, `{"p":2}`), 0, nil)
	wantErr(t, "set desired of deleted device", err, store.ErrNotFound)
	_, err = s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "dev-1", Properties: map[string]json.RawMessage{"p": json.RawMessage("1")}})
	wantErr(t, "report of deleted device", err, store.ErrNotFound)
	if err := checkPending(s, "app", "dev-1"); err != nil {
		t.Fatalf("queue of the deleted device: %v", err)
	}
	if page, err := s.ListDevices(ctx, "app", "", "", 10); err != nil || !slices.Equal(names(page.Devices), []string{"dev-10"}) {
		t.Fatalf("devices after delete: %v %v", names(page.Devices), err)
	}
	wantErr(t, "second delete", s.DeleteDevice(ctx, "app", "dev-1"), store.ErrNotFound)
	// Its messages stay readable, as they were.
	for id, state := range map[int64]string{1: store.StatePending, 4: store.StateDelivered, 5: store.StateFailed} {
		m, err := s.GetMessage(ctx, "app", id)
		must(t, err)
		if m.DeviceName != "dev-1" || m.State != state || m.Body != fmt.Sprint("body ", id) {
			t.Errorf("message %d after its device was deleted: %+v", id, m)
		}
	}
}

// checkOtherDevicesKept checks a delete of app/dev-1 left other devices
// untouched, the same name in another app included.
func checkOtherDevicesKept(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	if err := checkPending(s, "app", "dev-10", 6); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "other", "dev-1", 7); err != nil {
		t.Fatal(err)
	}
	if d, err := s.GetDevice(ctx, "other", "dev-1"); err != nil || d.Status != 1 {
		t.Fatalf("other/dev-1: %+v %v", d, err)
	}
	if sh, err := s.GetShadow(ctx, "other", "dev-1"); err != nil || sh.LastDesiredVersion != 2 {
		t.Fatalf("other/dev-1 shadow: %+v %v", sh, err)
	}
	// The online index lost the deleted device: only other/dev-1 is reset.
	if n, err := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 100, nil); err != nil || n != 1 {
		t.Fatalf("reset %d devices (%v), want 1", n, err)
	}
}

// checkNameFreeAgain checks the deleted app/dev-1's name is free again,
// for a new device with a fresh shadow and an empty queue that holds
// MaxPending messages.
func checkNameFreeAgain(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	errs, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "new-secret", TimeCreate: 2}})
	must(t, err)
	must(t, errs[0])
	d, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	if d.Secret != "new-secret" || d.TimeCreate != 2 || d.Status != 0 || d.ClientIP != "" {
		t.Fatalf("re-created device %+v", d)
	}
	sh, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if len(sh.Properties) != 0 || sh.LastDesiredVersion != 1 || sh.LastReportedVersion != 0 {
		t.Fatalf("re-created device's shadow %+v", sh)
	}
	if err := checkPending(s, "app", "dev-1"); err != nil {
		t.Fatalf("queue of the re-created device: %v", err)
	}
	for i := int64(1); i <= store.MaxPending; i++ {
		if err := s.CreateMessage(ctx, msg(100+i, "app", "dev-1", store.StatePending), 0, nil); err != nil {
			t.Fatalf("message %d to the re-created device: %v", i, err)
		}
	}
	err = s.CreateMessage(ctx, msg(100+store.MaxPending+1, "app", "dev-1", store.StatePending), 0, nil)
	wantErr(t, fmt.Sprint("message ", store.MaxPending+1, " to the re-created device"), err, store.ErrQueueFull)
}

// testConcurrentDeleteDevice deletes one device from many goroutines:
// exactly one succeeds.
func testConcurrentDeleteDevice(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	counts := race(t, 20, func(int) error { return s.DeleteDevice(context.Background(), "app", "dev-1") }, store.ErrNotFound)
	if counts["ok"] != 1 || counts[store.ErrNotFound.Error()] != 19 {
		t.Fatalf("outcomes %v, want 1 ok and 19 not found", counts)
	}
}

func testListDevicesPaging(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 3000
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("dev-%05d", i))
	}
	// Create out of order: listing sorts by name, not by creation.
	shuffled := slices.Clone(all)
	for i := range shuffled {
		j := (i * 7919) % n
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	for i := 0; i < n; i += 1000 {
		mustDevices(t, s, "app", shuffled[i:min(i+1000, n)]...)
	}
	mustDevices(t, s, "app", "dev", "dev-", "deu", "dev.", "zzz")
	mustDevices(t, s, "other", "dev-x", "dev-00001")

	for _, limit := range []int{1, 7, 300, 1000, n, n + 10} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				page, err := s.ListDevices(ctx, "app", "dev-", cursor, limit)
				must(t, err)
				if len(page.Devices) > limit {
					t.Fatalf("page of %d, limit %d", len(page.Devices), limit)
				}
				for _, d := range page.Devices {
					if d.AppKey != "app" {
						t.Fatalf("listed %+v", d)
					}
				}
				got = append(got, names(page.Devices)...)
				if page.Next == "" {
					break
				}
				if len(page.Devices) == 0 || page.Next != page.Devices[len(page.Devices)-1].Name {
					t.Fatalf("next %q after %d devices; want the last returned name", page.Next, len(page.Devices))
				}
				if pages > n {
					t.Fatal("paging does not end")
				}
				cursor = page.Next
			}
			want := append([]string{"dev-"}, all...)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %d devices, want each of %d once in order (first %v)", len(got), len(want), got[:min(5, len(got))])
			}
		})
	}
}

func testListDevicesPrefix(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Names are UTF-8; U+10FFFF has the highest bytes one can hold.
	mustDevices(t, s, "app", "a", "ab", "abc", "abd", "ab-1", "abcd", "ac", "b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff")
	mustDevices(t, s, "app2", "ab", "aba")
	tests := []struct {
		prefix, cursor string
		limit          int
		want           []string
		next           string
	}{
		{"", "", 100, []string{"a", "ab", "ab-1", "abc", "abcd", "abd", "ac", "b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
		{"ab", "", 10, []string{"ab", "ab-1", "abc", "abcd", "abd"}, ""},
		{"ab", "", 5, []string{"ab", "ab-1", "abc", "abcd", "abd"}, ""}, // exactly the remaining count: no next
		{"ab", "", 2, []string{"ab", "ab-1"}, "ab-1"},
		{"abc", "", 10, []string{"abc", "abcd"}, ""},
		{"abcd", "", 10, []string{"abcd"}, ""},
		{"abce", "", 10, nil, ""},
		{"b", "", 10, []string{"b", "ba"}, ""},
		{"\U0010ffff", "", 10, []string{"\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
		{"ÿ", "", 10, []string{"ÿ"}, ""},
		{"zz", "", 10, nil, ""},
		{"ab", "ab", 1, []string{"ab-1"}, "ab-1"},
		{"ab", "abc", 10, []string{"abcd", "abd"}, ""},
		{"ab", "abd", 10, nil, ""},
		// A cursor need not be a stored name or inside the prefix.
		{"ab", "abb", 10, []string{"abc", "abcd", "abd"}, ""},
		{"ab", "a", 2, []string{"ab", "ab-1"}, "ab-1"},
		{"ab", "b", 10, nil, ""},
		{"ab", "zzz", 10, nil, ""},
		{"", "ac", 10, []string{"b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("prefix %q cursor %q limit %d", tc.prefix, tc.cursor, tc.limit), func(t *testing.T) {
			page, err := s.ListDevices(ctx, "app", tc.prefix, tc.cursor, tc.limit)
			must(t, err)
			if got := names(page.Devices); !slices.Equal(got, tc.want) || page.Next != tc.next {
				t.Fatalf("got %q next %q, want %q next %q", got, page.Next, tc.want, tc.next)
			}
		})
	}
	if page, err := s.ListDevices(ctx, "empty-app", "", "", 10); err != nil || len(page.Devices) != 0 || page.Next != "" {
		t.Fatalf("app without devices: %+v %v", page, err)
	}
}

func testGetShadow(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetShadow(ctx, "app", "ghost")
	wantErr(t, "shadow of missing device", err, store.ErrNotFound)
	mustDevices(t, s, "app", "dev-1")
	sh, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if sh.Properties == nil || sh.LastDesiredVersion != 1 {
		t.Fatalf("new shadow %+v", sh)
	}
}

func testSetDesired(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.SetDesired(ctx, update("app", "ghost", 1, `{"p":1}`), 0, nil)
	wantErr(t, "missing device", err, store.ErrNotFound)
	mustDevices(t, s, "app", "dev-1")

	u := update("app", "dev-1", 1, `{"a":1,"b":"x"}`)
	u.Time = 1_700_000_000_123
	sh, err := s.SetDesired(ctx, u, 0, nil)
	must(t, err)
	if sh.LastDesiredVersion != 2 || sh.LastDesiredSTime != u.Time ||
		string(sh.Properties["a"].DesiredValue) != "1" || sh.Properties["a"].DesiredSTime != u.Time ||
		string(sh.Properties["b"].DesiredValue) != `"x"` || sh.Properties["b"].ReportedValue != nil {
		t.Fatalf("returned shadow %+v", sh)
	}
	stored, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if stored.LastDesiredVersion != 2 || stored.LastDesiredSTime != u.Time || string(stored.Properties["b"].DesiredValue) != `"x"` {
		t.Fatalf("stored shadow %+v", stored)
	}

	for _, v := range []int64{1, 3, 0, -1} {
		_, err := s.SetDesired(ctx, update("app", "dev-1", v, `{"a":2,"c":3}`), 0, nil)
		wantErr(t, fmt.Sprint("version ", v), err, store.ErrVersionConflict)
	}
	after, _ := s.GetShadow(ctx, "app", "dev-1")
	if after.LastDesiredVersion != 2 || string(after.Properties["a"].DesiredValue) != "1" || len(after.Properties) != 2 {
		t.Fatalf("a conflicting update was written: %+v", after)
	}

	u2 := update("app", "dev-1", 2, `{"a":3,"c":4.5}`)
	u2.Time = u.Time + 1000
	_, err = s.SetDesired(ctx, u2, 0, nil)
	must(t, err)
	got, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	want := map[string]string{"a": "3", "b": `"x"`, "c": "4.5"}
	wantTime := map[string]int64{"a": u2.Time, "b": u.Time, "c": u2.Time}
	if got.LastDesiredVersion != 3 || got.LastDesiredSTime != u2.Time || len(got.Properties) != len(want) {
		t.Fatalf("merged shadow %+v", got)
	}
	for name, v := range want {
		if p := got.Properties[name]; string(p.DesiredValue) != v || p.DesiredSTime != wantTime[name] {
			t.Errorf("property %s: %s at %d, want %s at %d", name, p.DesiredValue, p.DesiredSTime, v, wantTime[name])
		}
	}
}

func testSetDesiredSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	seq := &store.SeqEntry{Fingerprint: "fp", Status: 200, Body: []byte(`{"op_code":0}`), ExpiresAt: future()}
	_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 9, seq)
	must(t, err)
	e, err := s.GetSeq(ctx, "app", 9)
	must(t, err)
	if e.Fingerprint != "fp" || e.Status != 200 || string(e.Body) != `{"op_code":0}` || e.ExpiresAt != seq.ExpiresAt {
		t.Fatalf("seq entry %+v", e)
	}

	tests := []struct {
		name    string
		seqNo   int64
		version int64
		device  string
		want    error
	}{
		// A retry of the successful update carries a version that is now
		// stale; it must see ErrSeqUsed (and be replayed), not a conflict.
		{"seq used", 9, 2, "dev-1", store.ErrSeqUsed},
		{"seq used beats version conflict", 9, 1, "dev-1", store.ErrSeqUsed},
		{"seq used beats missing device", 9, 1, "ghost", store.ErrSeqUsed},
		{"version conflict records no seq", 10, 1, "dev-1", store.ErrVersionConflict},
		{"missing device records no seq", 11, 1, "ghost", store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SetDesired(ctx, update("app", tc.device, tc.version, `{"a":2}`), tc.seqNo, &store.SeqEntry{Fingerprint: "other", ExpiresAt: future()})
			wantErr(t, "set", err, tc.want)
			if sh, _ := s.GetShadow(ctx, "app", "dev-1"); sh.LastDesiredVersion != 2 || string(sh.Properties["a"].DesiredValue) != "1" {
				t.Fatalf("a refused update was applied: %+v", sh)
			}
			e, err := s.GetSeq(ctx, "app", tc.seqNo)
			if tc.want == store.ErrSeqUsed {
				if err != nil || e.Fingerprint != "fp" {
					t.Fatalf("the first entry was replaced: %+v %v", e, err)
				}
			} else {
				wantErr(t, "seq recorded for a failed update", err, store.ErrNotFound)
			}
		})
	}

	// seq_no is one space per app shared by property sets and messages.
	err = s.CreateMessage(ctx, msg(1, "app", "dev-1", store.StatePending), 9, seq)
	wantErr(t, "message with a property set's seq_no", err, store.ErrSeqUsed)
	// An expired entry does not block a new update, and is replaced.
	must(t, s.PutSeq(ctx, "app", 12, store.SeqEntry{Fingerprint: "old", ExpiresAt: past()}))
	_, err = s.SetDesired(ctx, update("app", "dev-1", 2, `{"a":2}`), 12, &store.SeqEntry{Fingerprint: "new", ExpiresAt: future()})
	must(t, err)
	if e, err := s.GetSeq(ctx, "app", 12); err != nil || e.Fingerprint != "new" {
		t.Fatalf("expired entry not replaced: %+v %v", e, err)
	}
	// A nil entry ignores seqNo entirely.
	_, err = s.SetDesired(ctx, update("app", "dev-1", 3, `{"a":3}`), 9, nil)
	must(t, err)
}

func testSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetSeq(ctx, "app", 1)
	wantErr(t, "get unset seq", err, store.ErrNotFound)
	// Negative and extreme seq_nos are distinct numbers like any other.
	for _, n := range []int64{1, -1, 0, 256, -256, 1 << 62, -1 << 63, 1<<63 - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := store.SeqEntry{Fingerprint: fmt.Sprint(n), Status: 200, Body: []byte(fmt.Sprintf(`{"n":%d}`, n)), ExpiresAt: future()}
			must(t, s.PutSeq(ctx, "app", n, e))
			wantErr(t, "reuse", s.PutSeq(ctx, "app", n, store.SeqEntry{Fingerprint: "again", ExpiresAt: future()}), store.ErrSeqUsed)
			got, err := s.GetSeq(ctx, "app", n)
			must(t, err)
			if got.Fingerprint != e.Fingerprint || string(got.Body) != string(e.Body) || got.Status != 200 || got.ExpiresAt != e.ExpiresAt {
				t.Fatalf("got %+v, want %+v", got, e)
			}
		})
	}
	_, err = s.GetSeq(ctx, "other-app", 1)
	wantErr(t, "another app's seq", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "other-app", 1, store.SeqEntry{ExpiresAt: future()}))
}

func testSeqExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "old", ExpiresAt: past()}))
	_, err := s.GetSeq(ctx, "app", 77)
	wantErr(t, "expired entry", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "new", ExpiresAt: future()}))
	if e, _ := s.GetSeq(ctx, "app", 77); e.Fingerprint != "new" {
		t.Fatalf("expired entry not replaced: %+v", e)
	}
	wantErr(t, "reuse of the replacement", s.PutSeq(ctx, "app", 77, store.SeqEntry{ExpiresAt: future()}), store.ErrSeqUsed)

	// An entry is used until ExpiresAt and free after it. The check before
	// expiry only counts when it finished in time, so a slow machine cannot
	// fail it.
	soon := time.Now().Add(500 * time.Millisecond)
	must(t, s.PutSeq(ctx, "app", 78, store.SeqEntry{Fingerprint: "soon", ExpiresAt: soon.UnixMilli()}))
	err = s.PutSeq(ctx, "app", 78, store.SeqEntry{ExpiresAt: future()})
	if time.Now().Before(soon) && !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("reuse before expiry: %v", err)
	}
	time.Sleep(time.Until(soon) + 10*time.Millisecond)
	_, err = s.GetSeq(ctx, "app", 78)
	wantErr(t, "entry after its expiry", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "app", 78, store.SeqEntry{Fingerprint: "later", ExpiresAt: future()}))
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

// race runs fn(i) on n goroutines started together and counts the
// outcomes by error (nil counted under "ok").
func race(t *testing.T, n int, fn func(i int) error, allowed ...error) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				counts["ok"]++
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					counts[a.Error()]++
					return
				}
			}
			t.Errorf("goroutine %d: %v", i, err)
		}()
	}
	close(start)
	wg.Wait()
	return counts
}

func testConcurrentSetDesired(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	counts := race(t, 50, func(i int) error {
		_, err := s.SetDesired(context.Background(), update("app", "dev-1", 1, fmt.Sprintf(`{"a":%d}`, i)), 0, nil)
		return err
	}, store.ErrVersionConflict)
	if counts["ok"] != 1 || counts[store.ErrVersionConflict.Error()] != 49 {
		t.Fatalf("outcomes %v, want 1 ok and 49 conflicts", counts)
	}
	if sh, _ := s.GetShadow(context.Background(), "app", "dev-1"); sh.LastDesiredVersion != 2 {
		t.Fatalf("shadow %+v", sh)
	}
}

func testConcurrentSetDesiredDevices(t *testing.T, s store.Store) {
	var devs []string
	for i := range 50 {
		devs = append(devs, fmt.Sprint("dev-", i))
	}
	mustDevices(t, s, "app", devs...)
	// Each device gets 4 writers in version order; all 200 must succeed.
	counts := race(t, 50, func(i int) error {
		for v := int64(1); v <= 4; v++ {
			if _, err := s.SetDesired(context.Background(), update("app", devs[i], v, `{"a":1}`), int64(i)*10+v, &store.SeqEntry{ExpiresAt: future()}); err != nil {
				return err
			}
		}
		return nil
	})
	if counts["ok"] != 50 {
		t.Fatalf("outcomes %v", counts)
	}
	for _, d := range devs {
		if sh, _ := s.GetShadow(context.Background(), "app", d); sh.LastDesiredVersion != 5 {
			t.Fatalf("%s: %+v", d, sh)
		}
	}
}

func testConcurrentPutSeq(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	ctx := context.Background()
	counts := race(t, 60, func(i int) error {
		seq := &store.SeqEntry{Fingerprint: fmt.Sprint(i), ExpiresAt: future()}
		switch i % 3 {
		case 0:
			return s.PutSeq(ctx, "app", 42, *seq)
		case 1:
			return s.CreateMessage(ctx, msg(int64(100+i), "app", "dev-1", store.StatePending), 42, seq)
		default:
			// Distinct versions never conflict with one another's version;
			// only the seq_no decides.
			_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 42, seq)
			return err
		}
	}, store.ErrSeqUsed)
	if counts["ok"] != 1 || counts[store.ErrSeqUsed.Error()] != 59 {
		t.Fatalf("outcomes %v, want 1 ok and 59 seq used", counts)
	}
	e, err := s.GetSeq(ctx, "app", 42)
	must(t, err)
	var winner int
	fmt.Sscan(e.Fingerprint, &winner)
	p, _ := s.PendingMessages(ctx, "app", "dev-1", 100)
	sh, _ := s.GetShadow(ctx, "app", "dev-1")
	switch winner % 3 {
	case 0:
		if len(p) != 0 || sh.LastDesiredVersion != 1 {
			t.Fatalf("PutSeq won but %d messages and version %d", len(p), sh.LastDesiredVersion)
		}
	case 1:
		if len(p) != 1 || p[0].ID != int64(100+winner) || sh.LastDesiredVersion != 1 {
			t.Fatalf("message %d won but queue %v and version %d", 100+winner, p, sh.LastDesiredVersion)
		}
	default:
		if len(p) != 0 || sh.LastDesiredVersion != 2 {
			t.Fatalf("SetDesired won but %d messages and version %d", len(p), sh.LastDesiredVersion)
		}
	}
}

func testConcurrentQueueLimit(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	ctx := context.Background()
	const prefill = store.MaxPending - 20
	for i := range prefill {
		must(t, s.CreateMessage(ctx, msg(int64(i), "app", "dev-1", store.StatePending), 0, nil))
	}
	counts := race(t, 50, func(i int) error {
		return s.CreateMessage(ctx, msg(int64(10000+i), "app", "dev-1", store.StatePending), 0, nil)
	}, store.ErrQueueFull)
	if counts["ok"] != 20 || counts[store.ErrQueueFull.Error()] != 30 {
		t.Fatalf("outcomes %v, want 20 ok and 30 queue full", counts)
	}
	if p, _ := s.PendingMessages(ctx, "app", "dev-1", 2*store.MaxPending); len(p) != store.MaxPending {
		t.Fatalf("%d pending", len(p))
	}
}

func testConcurrentCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	counts := race(t, 30, func(i int) error {
		// Every call also creates a name of its own, which must succeed.
		errs, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "contested", Secret: fmt.Sprint(i)}, {Name: fmt.Sprint("own-", i)}})
		if err != nil {
			return err
		}
		if errs[1] != nil {
			return fmt.Errorf("own device: %w", errs[1])
		}
		return errs[0]
	}, store.ErrAlreadyExists)
	if counts["ok"] != 1 || counts[store.ErrAlreadyExists.Error()] != 29 {
		t.Fatalf("outcomes %v, want 1 ok and 29 already exists", counts)
	}
	page, err := s.ListDevices(ctx, "app", "", "", 100)
	must(t, err)
	if len(page.Devices) != 31 {
		t.Fatalf("%d devices, want 31", len(page.Devices))
	}
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
