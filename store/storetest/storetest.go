package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// RunTests runs the conformance suite. newStore returns an empty store
// that the suite may use freely; the suite does not close it.
func RunTests(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Apps", testApps},
		{"CreateDevices", testCreateDevices},
		{"DevicesScopedToApp", testDevicesScoped},
		{"UpdateDevice", testUpdateDevice},
		{"ListDevices", testListDevices},
		{"SetDesired", testSetDesired},
		{"SetDesiredSeq", testSetDesiredSeq},
		{"Seq", testSeq},
		{"CreateMessage", testCreateMessage},
		{"QueueLimit", testQueueLimit},
		{"Meta", testMeta},
		{"ConcurrentSetDesired", testConcurrentSetDesired},
		{"ConcurrentPutSeq", testConcurrentPutSeq},
		{"ConcurrentCreateDevices", testConcurrentCreateDevices},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// RunReopenTests checks that what a store acknowledged is there after it is
// closed and opened again on the same dir.
func RunReopenTests(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	app := store.App{Key: "k1", Name: "one", MasterSecret: "m"}
	must(t, s.CreateApp(ctx, app))
	mustDevices(t, s, "k1", "dev-1")
	seq := &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte(`{"x":1}`), ExpiresAt: future()}
	if _, err := s.SetDesired(ctx, update("k1", "dev-1", 1, `{"p":1}`), 5, seq); err != nil {
		t.Fatal(err)
	}
	must(t, s.CreateMessage(ctx, msg(10, "k1", "dev-1", store.StatePending), 6, seq))
	must(t, s.PutMeta(ctx, "m", []byte("v")))
	must(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	if _, err := s.GetApp(ctx, "k1"); err != nil {
		t.Errorf("app after reopen: %v", err)
	}
	if _, err := s.GetDevice(ctx, "k1", "dev-1"); err != nil {
		t.Errorf("device after reopen: %v", err)
	}
	if sh, err := s.GetShadow(ctx, "k1", "dev-1"); err != nil || sh.LastDesiredVersion != 2 {
		t.Errorf("shadow after reopen: %+v %v", sh, err)
	}
	if _, err := s.GetSeq(ctx, "k1", 5); err != nil {
		t.Errorf("seq after reopen: %v", err)
	}
	if p, err := s.PendingMessages(ctx, "k1", "dev-1", 10); err != nil || len(p) != 1 {
		t.Errorf("pending after reopen: %v %v", p, err)
	}
	if v, err := s.GetMeta(ctx, "m"); err != nil || string(v) != "v" {
		t.Errorf("meta after reopen: %q %v", v, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func future() int64 { return time.Now().Add(time.Hour).UnixMilli() }

func mustDevices(t *testing.T, s store.Store, app string, names ...string) {
	t.Helper()
	devs := make([]store.Device, len(names))
	for i, n := range names {
		devs[i] = store.Device{AppKey: app, Name: n, Secret: "secret-" + n, TimeCreate: 1}
	}
	errs, err := s.CreateDevices(context.Background(), app, devs)
	must(t, err)
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
	return store.Message{ID: id, AppKey: app, DeviceName: dev, Body: fmt.Sprint("body ", id), TTL: 60, TimeCreate: 1, State: state,
		Records: []store.Record{{Type: store.RecordTargetValid, ChannelKey: app, MsgID: fmt.Sprint(id)}}}
}

func testApps(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetApp(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing app: %v", err)
	}
	if err := s.UpdateApp(ctx, store.App{Key: "b"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing app: %v", err)
	}
	must(t, s.CreateApp(ctx, store.App{Key: "b", Name: "B", MasterSecret: "s"}))
	must(t, s.CreateApp(ctx, store.App{Key: "a", Name: "A", MasterSecret: "s"}))
	if err := s.CreateApp(ctx, store.App{Key: "a", Name: "again"}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("create duplicate: %v", err)
	}
	max := 7.5
	app := store.App{Key: "a", Name: "A2", MasterSecret: "s2", RateLimits: map[string]int{"message": 5},
		Properties: []store.PropertyDef{{Name: "t", Type: store.TypeDouble, Max: &max}}}
	must(t, s.UpdateApp(ctx, app))
	got, err := s.GetApp(ctx, "a")
	must(t, err)
	if got.Name != "A2" || got.MasterSecret != "s2" || got.RateLimits["message"] != 5 || len(got.Properties) != 1 || *got.Properties[0].Max != 7.5 {
		t.Fatalf("after update: %+v", got)
	}
	apps, err := s.ListApps(ctx)
	must(t, err)
	if len(apps) != 2 || apps[0].Key != "a" || apps[1].Key != "b" {
		t.Fatalf("list: %+v", apps)
	}
}

func testCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "taken")
	errs, err := s.CreateDevices(ctx, "app", []store.Device{
		{Name: "new-1", Secret: "a"}, {Name: "taken", Secret: "b"}, {Name: "new-2", Secret: "c"}, {Name: "new-1", Secret: "d"},
	})
	must(t, err)
	want := []error{nil, store.ErrAlreadyExists, nil, store.ErrAlreadyExists}
	for i := range want {
		if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
			t.Errorf("result %d: %v, want %v", i, errs[i], want[i])
		}
	}
	d, err := s.GetDevice(ctx, "app", "new-1")
	must(t, err)
	if d.Secret != "a" || d.AppKey != "app" {
		t.Errorf("the first new-1 wins: %+v", d)
	}
	if d, _ := s.GetDevice(ctx, "app", "taken"); d.Secret != "secret-taken" {
		t.Errorf("existing device overwritten: %+v", d)
	}
	sh, err := s.GetShadow(ctx, "app", "new-2")
	must(t, err)
	if sh.LastDesiredVersion != 1 || len(sh.Properties) != 0 {
		t.Errorf("new shadow %+v", sh)
	}
	if _, err := s.GetShadow(ctx, "app", "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("shadow of missing device: %v", err)
	}
}

func testDevicesScoped(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app-a", "dev-1")
	if _, err := s.GetDevice(ctx, "app-b", "dev-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("app-b sees app-a's device: %v", err)
	}
	if _, err := s.SetDesired(ctx, update("app-b", "dev-1", 1, `{"p":1}`), 0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("app-b sets app-a's device: %v", err)
	}
	mustDevices(t, s, "app-b", "dev-1")
	must(t, s.CreateMessage(ctx, msg(1, "app-a", "dev-1", store.StatePending), 0, nil))
	if _, err := s.GetMessage(ctx, "app-b", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("app-b reads app-a's message: %v", err)
	}
	if p, _ := s.PendingMessages(ctx, "app-b", "dev-1", 10); len(p) != 0 {
		t.Fatalf("app-b's queue holds app-a's message")
	}
	// "app" + "-a" must not collide with other key splits.
	mustDevices(t, s, "app", "-a")
	if page, _ := s.ListDevices(ctx, "app", "", "", 10); len(page.Devices) != 1 {
		t.Fatalf("app lists %d devices, want 1", len(page.Devices))
	}
}

func testUpdateDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.UpdateDevice(ctx, store.Device{AppKey: "app", Name: "ghost"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	mustDevices(t, s, "app", "dev-1")
	d, _ := s.GetDevice(ctx, "app", "dev-1")
	d.Flag, d.Status, d.ClientIP, d.LastLoginTime, d.Mark = store.FlagDisabled, 1, "10.0.0.1", 99, "m"
	must(t, s.UpdateDevice(ctx, d))
	got, _ := s.GetDevice(ctx, "app", "dev-1")
	if got != d {
		t.Fatalf("got %+v, want %+v", got, d)
	}
}

func testListDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	var names []string
	for i := 0; i < 2500; i++ {
		names = append(names, fmt.Sprintf("dev-%05d", i))
	}
	for i := 0; i < len(names); i += 1000 {
		mustDevices(t, s, "app", names[i:min(i+1000, len(names))]...)
	}
	mustDevices(t, s, "app", "ab", "abc", "abd", "b")
	mustDevices(t, s, "other", "dev-x")
	seen, cursor := 0, ""
	for pages := 0; ; pages++ {
		page, err := s.ListDevices(ctx, "app", "dev-", cursor, 300)
		must(t, err)
		for _, d := range page.Devices {
			if d.Name != names[seen] {
				t.Fatalf("device %d is %s, want %s", seen, d.Name, names[seen])
			}
			seen++
		}
		if page.Next == "" {
			break
		}
		if pages > 20 {
			t.Fatal("paging does not end")
		}
		cursor = page.Next
	}
	if seen != len(names) {
		t.Fatalf("listed %d of %d", seen, len(names))
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"ab", []string{"ab", "abc", "abd"}},
		{"abc", []string{"abc"}},
		{"b", []string{"b"}},
		{"zz", nil},
	}
	for _, c := range cases {
		page, err := s.ListDevices(ctx, "app", c.prefix, "", 10)
		must(t, err)
		var got []string
		for _, d := range page.Devices {
			got = append(got, d.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) || page.Next != "" {
			t.Errorf("prefix %q: %v next %q, want %v", c.prefix, got, page.Next, c.want)
		}
	}
	page, _ := s.ListDevices(ctx, "app", "ab", "ab", 1)
	if len(page.Devices) != 1 || page.Devices[0].Name != "abc" || page.Next != "abc" {
		t.Errorf("after cursor ab: %+v", page)
	}
	page, _ = s.ListDevices(ctx, "app", "ab", "abd", 5)
	if len(page.Devices) != 0 || page.Next != "" {
		t.Errorf("after the last: %+v", page)
	}
}

func testSetDesired(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.SetDesired(ctx, update("app", "ghost", 1, `{"p":1}`), 0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing device: %v", err)
	}
	mustDevices(t, s, "app", "dev-1")
	sh, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1,"b":"x"}`), 0, nil)
	must(t, err)
	if sh.LastDesiredVersion != 2 || string(sh.Properties["b"].DesiredValue) != `"x"` || sh.Properties["a"].DesiredSTime == 0 || sh.LastDesiredSTime == 0 {
		t.Fatalf("after set: %+v", sh)
	}
	if _, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":2}`), 0, nil); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("stale version: %v", err)
	}
	if _, err := s.SetDesired(ctx, update("app", "dev-1", 3, `{"a":2}`), 0, nil); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("future version: %v", err)
	}
	_, err = s.SetDesired(ctx, update("app", "dev-1", 2, `{"a":3}`), 0, nil)
	must(t, err)
	got, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if got.LastDesiredVersion != 3 || string(got.Properties["a"].DesiredValue) != "3" || string(got.Properties["b"].DesiredValue) != `"x"` {
		t.Fatalf("merge: %+v", got)
	}
}

func testSetDesiredSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	seq := &store.SeqEntry{Fingerprint: "fp", Status: 200, Body: []byte("{}"), ExpiresAt: future()}
	_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 9, seq)
	must(t, err)
	e, err := s.GetSeq(ctx, "app", 9)
	must(t, err)
	if e.Fingerprint != "fp" || string(e.Body) != "{}" {
		t.Fatalf("seq entry %+v", e)
	}
	if _, err := s.SetDesired(ctx, update("app", "dev-1", 2, `{"a":2}`), 9, seq); !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("reused seq: %v", err)
	}
	if sh, _ := s.GetShadow(ctx, "app", "dev-1"); sh.LastDesiredVersion != 2 {
		t.Fatalf("a refused update was applied: %+v", sh)
	}
	// A version conflict records no seq_no.
	if _, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":2}`), 10, seq); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatal(err)
	}
	if _, err := s.GetSeq(ctx, "app", 10); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("seq recorded for a failed update: %v", err)
	}
	if err := s.CreateMessage(ctx, msg(1, "app", "dev-1", store.StatePending), 9, seq); !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("seq_no space is shared with messages: %v", err)
	}
}

func testSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetSeq(ctx, "app", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	for _, n := range []int64{1, -1, 0, 1 << 62} {
		must(t, s.PutSeq(ctx, "app", n, store.SeqEntry{Fingerprint: fmt.Sprint(n), ExpiresAt: future()}))
		if err := s.PutSeq(ctx, "app", n, store.SeqEntry{ExpiresAt: future()}); !errors.Is(err, store.ErrSeqUsed) {
			t.Fatalf("seq %d reused: %v", n, err)
		}
		if e, err := s.GetSeq(ctx, "app", n); err != nil || e.Fingerprint != fmt.Sprint(n) {
			t.Fatalf("seq %d: %+v %v", n, e, err)
		}
	}
	must(t, s.PutSeq(ctx, "other-app", 1, store.SeqEntry{ExpiresAt: future()}))
	past := time.Now().Add(-time.Second).UnixMilli()
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "old", ExpiresAt: past}))
	if _, err := s.GetSeq(ctx, "app", 77); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired entry returned: %v", err)
	}
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "new", ExpiresAt: future()}))
	if e, _ := s.GetSeq(ctx, "app", 77); e.Fingerprint != "new" {
		t.Fatalf("expired entry not replaced: %+v", e)
	}
}

func testCreateMessage(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	for _, id := range []int64{5, 3, 9} {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	must(t, s.CreateMessage(ctx, msg(7, "app", "dev-1", store.StateFailed), 0, nil))
	p, err := s.PendingMessages(ctx, "app", "dev-1", 10)
	must(t, err)
	var ids []int64
	for _, m := range p {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[3 5 9]" {
		t.Fatalf("pending %v, want msgid order [3 5 9] without the failed 7", ids)
	}
	if p, _ := s.PendingMessages(ctx, "app", "dev-1", 2); len(p) != 2 {
		t.Fatalf("limit ignored: %d", len(p))
	}
	m, err := s.GetMessage(ctx, "app", 7)
	must(t, err)
	if m.State != store.StateFailed || m.Body != "body 7" || len(m.Records) != 1 {
		t.Fatalf("message %+v", m)
	}
	if _, err := s.GetMessage(ctx, "app", 8); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	seq := &store.SeqEntry{Fingerprint: "f", ExpiresAt: future()}
	must(t, s.CreateMessage(ctx, msg(11, "app", "dev-1", store.StatePending), 4, seq))
	if err := s.CreateMessage(ctx, msg(12, "app", "dev-1", store.StatePending), 4, seq); !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("reused seq: %v", err)
	}
	if _, err := s.GetMessage(ctx, "app", 12); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("a refused message was stored")
	}
}

func testQueueLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	for i := 1; i <= store.MaxPending; i++ {
		must(t, s.CreateMessage(ctx, msg(int64(i), "app", "dev-1", store.StatePending), 0, nil))
	}
	seq := &store.SeqEntry{Fingerprint: "f", ExpiresAt: future()}
	if err := s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StatePending), 8, seq); !errors.Is(err, store.ErrQueueFull) {
		t.Fatalf("message %d: %v", store.MaxPending+1, err)
	}
	if _, err := s.GetSeq(ctx, "app", 8); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("seq recorded for a refused message")
	}
	must(t, s.CreateMessage(ctx, msg(5000, "app", "dev-1", store.StateFailed), 8, seq))
	must(t, s.CreateMessage(ctx, msg(5001, "app", "dev-2", store.StatePending), 0, nil))
	if p, _ := s.PendingMessages(ctx, "app", "dev-1", 2*store.MaxPending); len(p) != store.MaxPending {
		t.Fatalf("%d pending", len(p))
	}
}

func testMeta(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetMeta(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	must(t, s.PutMeta(ctx, "k", []byte("v1")))
	must(t, s.PutMeta(ctx, "k", []byte("v2")))
	if v, err := s.GetMeta(ctx, "k"); err != nil || string(v) != "v2" {
		t.Fatalf("%q %v", v, err)
	}
	must(t, s.Ping(ctx))
}

func testConcurrentSetDesired(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	var ok, conflict int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := s.SetDesired(context.Background(), update("app", "dev-1", 1, fmt.Sprintf(`{"a":%d}`, i)), 0, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrVersionConflict):
				conflict++
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if ok != 1 || conflict != 49 {
		t.Fatalf("%d succeeded and %d conflicted, want 1 and 49", ok, conflict)
	}
}

func testConcurrentPutSeq(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	var ok, used int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			seq := &store.SeqEntry{Fingerprint: "f", ExpiresAt: future()}
			var err error
			if i%2 == 0 {
				err = s.PutSeq(context.Background(), "app", 42, *seq)
			} else {
				err = s.CreateMessage(context.Background(), msg(int64(100+i), "app", "dev-1", store.StatePending), 42, seq)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrSeqUsed):
				used++
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if ok != 1 || used != 49 {
		t.Fatalf("%d succeeded and %d found the seq_no used, want 1 and 49", ok, used)
	}
}

func testConcurrentCreateDevices(t *testing.T, s store.Store) {
	var ok int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs, err := s.CreateDevices(context.Background(), "app", []store.Device{{Name: "contested", Secret: "s"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
			} else if errs[0] == nil {
				ok++
			}
		}()
	}
	wg.Wait()
	if ok != 1 {
		t.Fatalf("%d creations of one name succeeded", ok)
	}
}
