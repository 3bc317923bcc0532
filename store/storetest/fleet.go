package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// fleetTests are the cases of RunTests for tags, batch sends and
// broadcasts (store.Fleet).
var fleetTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"ListTagged", testListTagged},
	{"TagIndexFollowsWrites", testTagIndexFollowsWrites},
	{"GetDevices", testGetDevices},
	{"FlagEpoch", testFlagEpoch},
	{"CountBroadcast", testCountBroadcast},
	{"EnabledNames", testEnabledNames},
	{"CreateMessages", testCreateMessages},
	{"CreateMessagesQueueFull", testCreateMessagesQueueFull},
	{"Broadcasts", testBroadcasts},
	{"BroadcastSteps", testBroadcastSteps},
	{"BroadcastStepEpoch", testBroadcastStepEpoch},
	{"BatchSeqEpoch", testBatchSeqEpoch},
	{"BroadcastStepPrepared", testBroadcastStepPrepared},
}

// tagged creates the app's devices, each name with its tags.
func tagged(t *testing.T, s store.Store, app string, devs map[string][]string) {
	t.Helper()
	var list []store.Device
	for _, n := range slices.Sorted(maps.Keys(devs)) {
		list = append(list, store.Device{Name: n, Secret: "s", TimeCreate: 1, Tags: devs[n]})
	}
	errs, err := s.CreateDevices(context.Background(), app, list)
	must(t, err)
	for _, e := range errs {
		must(t, e)
	}
}

// listTagged reads every page of the tag's devices, limit at a time.
func listTagged(t *testing.T, s store.Store, app, tag string, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for range 100 {
		p, err := s.ListTagged(context.Background(), app, tag, cursor, limit)
		must(t, err)
		if len(p.Devices) > limit {
			t.Fatalf("page of %d devices, limit %d", len(p.Devices), limit)
		}
		for _, d := range p.Devices {
			if !slices.Contains(d.Tags, tag) {
				t.Fatalf("ListTagged(%s) returned %s with tags %v", tag, d.Name, d.Tags)
			}
		}
		out = append(out, names(p.Devices)...)
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
	t.Fatal("ListTagged never ended")
	return nil
}

func testListTagged(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "k1"}))
	must(t, s.CreateApp(ctx, store.App{Key: "k2"}))
	tagged(t, s, "k1", map[string][]string{
		"dev-a": {"floor:1", "lamp"}, "dev-b": {"lamp"}, "dev-c": nil,
		"dev-d": {"lamp", "x@y.z"}, "dev-e": {"floor:1"},
	})
	tagged(t, s, "k2", map[string][]string{"dev-a": {"lamp"}, "dev-z": {"lamp"}})
	d, err := s.GetDevice(ctx, "k1", "dev-d")
	must(t, err)
	if !slices.Equal(d.Tags, []string{"lamp", "x@y.z"}) {
		t.Fatalf("stored tags %v", d.Tags)
	}
	for _, limit := range []int{1, 2, 3, 10} {
		if got := listTagged(t, s, "k1", "lamp", limit); !slices.Equal(got, []string{"dev-a", "dev-b", "dev-d"}) {
			t.Fatalf("limit %d: lamp devices of k1 %v", limit, got)
		}
	}
	if got := listTagged(t, s, "k1", "floor:1", 5); !slices.Equal(got, []string{"dev-a", "dev-e"}) {
		t.Fatalf("floor:1 devices %v", got)
	}
	if got := listTagged(t, s, "k2", "lamp", 5); !slices.Equal(got, []string{"dev-a", "dev-z"}) {
		t.Fatalf("k2 lamp devices %v (apps must not mix)", got)
	}
	if got := listTagged(t, s, "k1", "none", 5); len(got) != 0 {
		t.Fatalf("untagged tag lists %v", got)
	}
	if got := listTagged(t, s, "k1", "lam", 5); len(got) != 0 {
		t.Fatalf("a tag's prefix lists %v", got)
	}
	p, err := s.ListTagged(ctx, "k1", "lamp", "dev-b", 5)
	must(t, err)
	if got := names(p.Devices); !slices.Equal(got, []string{"dev-d"}) || p.Next != "" {
		t.Fatalf("after dev-b: %v next %q", got, p.Next)
	}
}

func testTagIndexFollowsWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "k1"}))
	tagged(t, s, "k1", map[string][]string{"dev-a": {"a", "b"}, "dev-b": {"b"}})
	_, err := s.UpdateDevice(ctx, "k1", "dev-a", func(d *store.Device) error {
		d.Tags = []string{"b", "c"}
		return nil
	})
	must(t, err)
	// A presence write that leaves the tags keeps the index as it is.
	_, err = s.UpdateDevice(ctx, "k1", "dev-b", func(d *store.Device) error {
		d.Status = 1
		return nil
	})
	must(t, err)
	check := func(tag string, want ...string) {
		t.Helper()
		if got := listTagged(t, s, "k1", tag, 10); !slices.Equal(got, want) {
			t.Fatalf("tag %s: %v, want %v", tag, got, want)
		}
	}
	check("a")
	check("b", "dev-a", "dev-b")
	check("c", "dev-a")
	// An error from fn changes nothing.
	_, err = s.UpdateDevice(ctx, "k1", "dev-a", func(d *store.Device) error {
		d.Tags = nil
		return store.ErrVersionConflict
	})
	wantErr(t, "failing update", err, store.ErrVersionConflict)
	check("c", "dev-a")
	must(t, s.DeleteDevice(ctx, "k1", "dev-a"))
	check("b", "dev-b")
	check("c")
	// A new device of the deleted name starts with its own tags only.
	tagged(t, s, "k1", map[string][]string{"dev-a": {"d"}})
	check("b", "dev-b")
	check("d", "dev-a")
}

func testGetDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3")
	mustDevices(t, s, "other", "dev-4")
	_, err := s.GetDevice(ctx, "app", "dev-2") // cached where the backend caches
	must(t, err)
	_, err = s.UpdateDevice(ctx, "app", "dev-3", func(d *store.Device) error {
		d.Flag = store.FlagDisabled
		return nil
	})
	must(t, err)
	got, err := s.GetDevices(ctx, "app", []string{"dev-3", "dev-9", "dev-1", "dev-4", "dev-2"})
	must(t, err)
	if n := names(got); !slices.Equal(n, []string{"dev-3", "dev-1", "dev-2"}) {
		t.Fatalf("devices %v, want dev-3, dev-1, dev-2 (in the order asked, missing and other apps' left out)", n)
	}
	if got[0].Flag != store.FlagDisabled || got[0].AppKey != "app" || got[1].Flag != store.FlagEnabled {
		t.Fatalf("devices %+v", got)
	}
	must(t, s.DeleteDevice(ctx, "app", "dev-2"))
	if got, err := s.GetDevices(ctx, "app", []string{"dev-2", "dev-1"}); err != nil || !slices.Equal(names(got), []string{"dev-1"}) {
		t.Fatalf("after a delete: %v %v", names(got), err)
	}
	if got, err := s.GetDevices(ctx, "app", nil); err != nil || len(got) != 0 {
		t.Fatalf("no names: %v %v", got, err)
	}
}

// testFlagEpoch: FlagEpoch changes when a device's flag changes and when
// a device is deleted, not on other device writes (a store that cannot
// tell says so, and is not held to it).
func testFlagEpoch(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	e0, ok := flagEpoch(s)
	if !ok {
		t.Skip("the store cannot tell: the fan-out always reads its devices again")
	}
	update := func(name string, fn func(*store.Device)) {
		t.Helper()
		_, err := s.UpdateDevice(ctx, "app", name, func(d *store.Device) error {
			fn(d)
			return nil
		})
		must(t, err)
	}
	epoch := func() uint64 {
		e, ok := flagEpoch(s)
		if !ok {
			t.Fatal("FlagEpoch stopped telling")
		}
		return e
	}
	update("dev-1", func(d *store.Device) { d.Mark, d.Status, d.LastLoginTime = "m", 1, 5 })
	if e := epoch(); e != e0 {
		t.Fatalf("epoch %d after a write that kept the flag, want %d", e, e0)
	}
	update("dev-1", func(d *store.Device) { d.Flag = store.FlagDisabled })
	e1 := epoch()
	if e1 == e0 {
		t.Fatal("epoch unchanged after a device was disabled")
	}
	update("dev-1", func(d *store.Device) { d.Flag = store.FlagEnabled })
	e2 := epoch()
	if e2 == e1 {
		t.Fatal("epoch unchanged after a device was enabled")
	}
	must(t, s.DeleteDevice(ctx, "app", "dev-2"))
	if e := epoch(); e == e2 {
		t.Fatal("epoch unchanged after a device was deleted")
	}
}

// testCountBroadcast: CountBroadcast counts by state the app's messages
// of the broadcast within the msgids given, and no other app's, other
// broadcast's or single send's.
func testCountBroadcast(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	must(t, s.CreateApp(ctx, store.App{Key: "other"}))
	mustDevices(t, s, "other", "dev-1")
	mk := func(id int64, app, dev, state string, bc int64) store.BatchMessage {
		bm := batchMsg(id, app, dev, state)
		bm.Message.Broadcast, bm.Full.Broadcast = bc, bc
		if bc == 7 {
			bm.Message.Params = json.RawMessage(`{"broadcast_id":"7","x":[{"a":"q\"}"}]}`)
		}
		return bm
	}
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		mk(100, "app", "dev-1", store.StatePending, 7),
		mk(101, "app", "dev-2", store.StatePending, 7),
		mk(102, "app", "dev-1", store.StateFailed, 7),
		mk(103, "app", "dev-2", store.StatePending, 8), // another broadcast
		mk(104, "app", "dev-1", store.StatePending, 0), // a single send
		mk(106, "app", "dev-2", store.StatePending, 7),
		mk(110, "app", "dev-1", store.StatePending, 7), // past last
	}, nil, nil)
	must(t, err)
	_, err = s.CreateMessages(ctx, "other", []store.BatchMessage{mk(105, "other", "dev-1", store.StatePending, 7)}, nil, nil)
	must(t, err)
	_, err = s.UpdateMessage(ctx, "app", 101, func(m *store.Message) error {
		m.State = store.StateDelivered
		return nil
	})
	must(t, err)
	got, err := s.CountBroadcast(ctx, "app", 7, 100, 106)
	must(t, err)
	if want := (store.BroadcastCounts{Delivered: 1, Failed: 1, Pending: 2}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if got, err := s.CountBroadcast(ctx, "app", 7, 0, 0); err != nil || got != (store.BroadcastCounts{}) {
		t.Fatalf("no messages yet: %+v %v", got, err)
	}
}

func testEnabledNames(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "k1"}))
	must(t, s.CreateApp(ctx, store.App{Key: "k2"}))
	tagged(t, s, "k1", map[string][]string{
		"dev-a": {"lamp"}, "dev-b": {"lamp", "x"}, "dev-c": nil, "dev-d": {"lamp"}, "dev-e": {"x"}, "dev-f": {"lamp"},
	})
	tagged(t, s, "k2", map[string][]string{"dev-a": {"lamp"}, "dev-z": {"lamp"}})
	_, err := s.UpdateDevice(ctx, "k1", "dev-d", func(d *store.Device) error {
		d.Flag = store.FlagDisabled
		return nil
	})
	must(t, err)
	must(t, s.DeleteDevice(ctx, "k1", "dev-f"))
	check := func(tag string, want ...string) {
		t.Helper()
		got, err := s.EnabledNames(ctx, "k1", tag)
		must(t, err)
		if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Fatalf("enabled names of tag %q: %v, want %v", tag, got, want)
		}
	}
	check("", "dev-a", "dev-b", "dev-c", "dev-e")
	check("lamp", "dev-a", "dev-b")
	check("x", "dev-b", "dev-e")
	check("none")
	if got, err := s.EnabledNames(ctx, "k3", ""); err != nil || len(got) != 0 {
		t.Fatalf("an app without devices: %v %v", got, err)
	}
}

// batchMsg is a BatchMessage of msg(id, ...) with its queue-full form and
// answers naming the id and outcome.
func batchMsg(id int64, app, dev, state string) store.BatchMessage {
	m := msg(id, app, dev, state)
	m.Records = append(m.Records, store.Record{Type: store.RecordSubmitSuccess, SentTime: 1})
	full := m
	full.State = store.StateFailed
	full.Records = []store.Record{m.Records[0], {Type: store.RecordSubmitFailure, SentTime: 1, Error: &store.RecordError{Code: 3004, Message: "full"}}}
	ids := strconv.FormatInt(id, 10)
	return store.BatchMessage{Message: m, Full: full, Answers: [3][]byte{
		[]byte(`{"id":` + ids + `,"o":"stored"}`), []byte(`{"id":` + ids + `,"o":"full"}`), []byte(`{"id":` + ids + `,"o":"gone"}`),
	}}
}

func testCreateMessages(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	mustDevices(t, s, "other", "dev-3")
	batch := []store.BatchMessage{
		batchMsg(11, "app", "dev-1", store.StatePending),
		batchMsg(12, "app", "dev-9", store.StatePending), // no such device
		batchMsg(13, "app", "dev-2", store.StatePending),
		batchMsg(14, "app", "dev-9", store.StateFailed),  // stored without a device
		batchMsg(15, "app", "dev-3", store.StatePending), // a device of another app
	}
	seq := &store.BatchSeq{SeqNo: 7, Entry: store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: future()}, Prefix: []byte(`{"resp":[`), Suffix: []byte(`]}`)}
	out, err := s.CreateMessages(ctx, "app", batch, seq, nil)
	must(t, err)
	if want := []int{store.BatchStored, store.BatchGone, store.BatchStored, store.BatchStored, store.BatchGone}; !slices.Equal(out, want) {
		t.Fatalf("outcomes %v, want %v", out, want)
	}
	e, err := s.GetSeq(ctx, "app", 7)
	must(t, err)
	wantBody := `{"resp":[{"id":11,"o":"stored"},{"id":12,"o":"gone"},{"id":13,"o":"stored"},{"id":14,"o":"stored"},{"id":15,"o":"gone"}]}`
	if string(e.Body) != wantBody || e.Fingerprint != "f" || e.Status != 200 {
		t.Fatalf("seq entry %q %+v", e.Body, e)
	}
	for id, state := range map[int64]string{11: store.StatePending, 13: store.StatePending, 14: store.StateFailed} {
		m, err := s.GetMessage(ctx, "app", id)
		if err != nil || m.State != state || len(m.Records) != 2 {
			t.Fatalf("message %d: %+v %v", id, m, err)
		}
	}
	for _, id := range []int64{12, 15} {
		_, err := s.GetMessage(ctx, "app", id)
		wantErr(t, fmt.Sprint("message ", id), err, store.ErrNotFound)
		_, err = s.GetMessage(ctx, "other", id)
		wantErr(t, fmt.Sprint("message ", id, " in the other app"), err, store.ErrNotFound)
	}
	must(t, checkPending(s, "app", "dev-1", 11))
	must(t, checkPending(s, "app", "dev-2", 13))
	must(t, checkPending(s, "other", "dev-3"))
	// 14 is the highest stored; a backend that raises the highest id
	// before it knows (Redis Cluster) may say 15, which is never reused.
	if last, err := s.LastMessageID(ctx); err != nil || last < 14 || last > 15 {
		t.Fatalf("last msgid %d %v", last, err)
	}
	entries, err := s.ReadOutbox(ctx, 0, 100)
	must(t, err)
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	if want := []string{"11-0", "11-1", "13-0", "13-1", "14-0", "14-1"}; !slices.Equal(ids, want) {
		t.Fatalf("outbox %v, want %v", ids, want)
	}
	seqs := map[int64]bool{}
	for _, e := range entries {
		if seqs[e.Seq] {
			t.Fatalf("outbox Seq %d twice", e.Seq)
		}
		seqs[e.Seq] = true
	}
	if ms, err := s.ListMessages(ctx, "app", 0, 10); err != nil || len(ms) != 3 {
		t.Fatalf("listed %d messages, %v", len(ms), err)
	}
	// The seq_no is now used: nothing of a second batch is written.
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{batchMsg(21, "app", "dev-1", store.StatePending)}, seq, nil)
	wantErr(t, "reused seq_no", err, store.ErrSeqUsed)
	_, err = s.GetMessage(ctx, "app", 21)
	wantErr(t, "message of a refused batch", err, store.ErrNotFound)
	// A message's seq_no and a batch's share one space.
	err = s.CreateMessage(ctx, msg(22, "app", "dev-1", store.StatePending), 7, &store.SeqEntry{Fingerprint: "g", ExpiresAt: future()})
	wantErr(t, "message with a batch's seq_no", err, store.ErrSeqUsed)
	// Without a seq_no.
	out, err = s.CreateMessages(ctx, "app", []store.BatchMessage{batchMsg(23, "app", "dev-1", store.StatePending)}, nil, nil)
	must(t, err)
	if !slices.Equal(out, []int{store.BatchStored}) {
		t.Fatalf("outcome %v", out)
	}
	must(t, checkPending(s, "app", "dev-1", 11, 23))
}

func testCreateMessagesQueueFull(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	must(t, s.CreateMessage(ctx, msg(1, "app", "dev-1", store.StatePending), 0, nil))
	// One batch fills dev-1's queue: its own earlier messages count.
	var batch []store.BatchMessage
	for i := int64(2); i <= store.MaxPending+2; i++ {
		batch = append(batch, batchMsg(i, "app", "dev-1", store.StatePending))
	}
	batch = append(batch, batchMsg(5000, "app", "dev-2", store.StatePending))
	out, err := s.CreateMessages(ctx, "app", batch, nil, nil)
	must(t, err)
	for i, o := range out {
		want := store.BatchStored
		if id := batch[i].Message.ID; id > store.MaxPending && id < 5000 {
			want = store.BatchFull
		}
		if o != want {
			t.Fatalf("message %d: outcome %d, want %d", batch[i].Message.ID, o, want)
		}
	}
	m, err := s.GetMessage(ctx, "app", store.MaxPending+1)
	must(t, err)
	if m.State != store.StateFailed || m.Records[1].Type != store.RecordSubmitFailure {
		t.Fatalf("queue-full message stored as %+v", m)
	}
	p, err := s.PendingMessages(ctx, "app", "dev-1", store.MaxPending+10)
	must(t, err)
	if len(p) != store.MaxPending || p[len(p)-1].ID != store.MaxPending {
		t.Fatalf("dev-1 has %d pending", len(p))
	}
	must(t, checkPending(s, "app", "dev-2", 5000))
	err = s.CreateMessage(ctx, msg(6000, "app", "dev-1", store.StatePending), 0, nil)
	wantErr(t, "a send to the full queue", err, store.ErrQueueFull)
}

func newBroadcast(app string, id int64) store.Broadcast {
	return store.Broadcast{ID: id, AppKey: app, Tag: "lamp", Body: "hi", TTL: 60, Params: json.RawMessage(`{"a":"b"}`),
		TimeCreate: 1, Targets: 3, Chunks: 2, State: store.BroadcastFanningOut}
}

// someTargets are newBroadcast's targets in its two chunks.
var someTargets = [][]string{{"dev-1", "dev-2"}, {"dev-3"}}

// wantTargets checks chunk n of the broadcast's targets: want, or gone
// when want is nil.
func wantTargets(t *testing.T, s store.Store, app string, id int64, n int, want []string) {
	t.Helper()
	got, err := s.BroadcastTargets(context.Background(), app, id, n)
	if want == nil {
		wantErr(t, fmt.Sprintf("chunk %d of broadcast %d", n, id), err, store.ErrNotFound)
		return
	}
	must(t, err)
	if !slices.Equal(got, want) {
		t.Fatalf("chunk %d of broadcast %d: %q, want %q", n, id, got, want)
	}
}

func testBroadcasts(t *testing.T, s store.Store) {
	ctx := context.Background()
	seq := &store.SeqEntry{Fingerprint: "f", Status: 200, Body: []byte(`{"broadcast_id":9007199254740990}`), ExpiresAt: future()}
	b := newBroadcast("app", 9007199254740990)
	must(t, s.CreateBroadcast(ctx, b, someTargets, 3, seq))
	got, err := s.GetBroadcast(ctx, "app", b.ID)
	must(t, err)
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("stored %+v, want %+v", got, b)
	}
	if e, err := s.GetSeq(ctx, "app", 3); err != nil || string(e.Body) != string(seq.Body) {
		t.Fatalf("seq entry %+v %v", e, err)
	}
	wantTargets(t, s, "app", b.ID, 0, someTargets[0])
	wantTargets(t, s, "app", b.ID, 1, someTargets[1])
	wantTargets(t, s, "app", b.ID, 2, nil)
	wantTargets(t, s, "other", b.ID, 0, nil)
	refused := newBroadcast("app", 5)
	wantErr(t, "reused seq_no", s.CreateBroadcast(ctx, refused, [][]string{{"x"}, {"y"}}, 3, seq), store.ErrSeqUsed)
	wantTargets(t, s, "app", 5, 0, nil)
	wantErr(t, "same id", s.CreateBroadcast(ctx, newBroadcast("app", b.ID), [][]string{{"x"}, {"y"}}, 4, nil), store.ErrAlreadyExists)
	wantTargets(t, s, "app", b.ID, 0, someTargets[0])
	_, err = s.GetBroadcast(ctx, "app", 5)
	wantErr(t, "refused broadcast", err, store.ErrNotFound)
	_, err = s.GetBroadcast(ctx, "other", b.ID)
	wantErr(t, "another app's broadcast", err, store.ErrNotFound)
	must(t, s.CreateBroadcast(ctx, newBroadcast("other", 6), someTargets, 0, nil))
	// Many names, and a chunk of none.
	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("device-%05d:x@y.z", i))
	}
	big := newBroadcast("app", 7)
	big.Targets, big.Chunks = 3000, 2
	must(t, s.CreateBroadcast(ctx, big, [][]string{many, {}}, 0, nil))
	wantTargets(t, s, "app", 7, 0, many)
	wantTargets(t, s, "app", 7, 1, []string{})
	_, err = s.UpdateBroadcast(ctx, "app", 7, func(b *store.Broadcast) error {
		b.State, b.Swept = store.BroadcastCancelled, true
		return nil
	})
	must(t, err)

	active := func(want ...int64) {
		t.Helper()
		bs, err := s.ActiveBroadcasts(ctx)
		must(t, err)
		var ids []int64
		for _, b := range bs {
			ids = append(ids, b.ID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("active %v, want %v", ids, want)
		}
	}
	active(6, b.ID)
	// An update while fanning out keeps the targets.
	_, err = s.UpdateBroadcast(ctx, "app", b.ID, func(*store.Broadcast) error { return nil })
	must(t, err)
	wantTargets(t, s, "app", b.ID, 1, someTargets[1])
	// A cancel deletes them: no step reads them again.
	got, err = s.UpdateBroadcast(ctx, "app", b.ID, func(b *store.Broadcast) error {
		b.State = store.BroadcastCancelled
		return nil
	})
	must(t, err)
	if got.State != store.BroadcastCancelled || got.Tag != "lamp" || got.Chunks != 2 || got.Chunk != 0 {
		t.Fatalf("updated %+v", got)
	}
	wantTargets(t, s, "app", b.ID, 0, nil)
	wantTargets(t, s, "app", b.ID, 1, nil)
	wantTargets(t, s, "other", 6, 0, someTargets[0])
	active(6, b.ID) // cancelled, not swept yet
	_, err = s.UpdateBroadcast(ctx, "app", b.ID, func(b *store.Broadcast) error {
		b.Swept = true
		return nil
	})
	must(t, err)
	active(6)
	_, err = s.UpdateBroadcast(ctx, "app", 77, func(*store.Broadcast) error { return nil })
	wantErr(t, "update of a missing broadcast", err, store.ErrNotFound)
}

func testBroadcastSteps(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3")
	b := newBroadcast("app", 100)
	must(t, s.CreateBroadcast(ctx, b, someTargets, 0, nil))
	step := &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0}
	out, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(102, "app", "dev-1", store.StatePending), batchMsg(101, "app", "dev-2", store.StateFailed),
	}, nil, step)
	must(t, err)
	if !slices.Equal(out, []int{store.BatchStored, store.BatchStored}) {
		t.Fatalf("outcomes %v", out)
	}
	got, err := s.GetBroadcast(ctx, "app", 100)
	must(t, err)
	if got.Chunk != 1 || got.Queued != 2 || got.FirstID != 101 || got.LastID != 102 || got.State != store.BroadcastFanningOut {
		t.Fatalf("after a step: %+v", got)
	}
	wantTargets(t, s, "app", 100, 0, nil) // the step deleted its chunk
	wantTargets(t, s, "app", 100, 1, someTargets[1])
	// A step from a stale cursor (another node's, or a retry of a step
	// that landed) writes nothing.
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{batchMsg(103, "app", "dev-1", store.StatePending)}, nil, step)
	wantErr(t, "stale step", err, store.ErrVersionConflict)
	_, err = s.GetMessage(ctx, "app", 103)
	wantErr(t, "message of a stale step", err, store.ErrNotFound)
	must(t, checkPending(s, "app", "dev-1", 102))
	_, err = s.CreateMessages(ctx, "app", nil, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 1, Done: true})
	must(t, err)
	got, err = s.GetBroadcast(ctx, "app", 100)
	must(t, err)
	if got.Chunk != 2 || got.Queued != 2 || got.State != store.BroadcastDone || got.Active() {
		t.Fatalf("after the last step: %+v", got)
	}
	wantTargets(t, s, "app", 100, 1, nil)
	if bs, err := s.ActiveBroadcasts(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("active after done: %v %v", bs, err)
	}
	// A cancelled broadcast takes no step.
	must(t, s.CreateBroadcast(ctx, newBroadcast("app", 200), someTargets, 0, nil))
	_, err = s.UpdateBroadcast(ctx, "app", 200, func(b *store.Broadcast) error {
		b.State = store.BroadcastCancelled
		return nil
	})
	must(t, err)
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{batchMsg(201, "app", "dev-1", store.StatePending)},
		nil, &store.BroadcastStep{AppKey: "app", ID: 200})
	wantErr(t, "step of a cancelled broadcast", err, store.ErrVersionConflict)
}

// testStepCrash checks a broadcast step against a crash: one made durable
// by a Barrier survives whole; one not yet synced survives whole or not
// at all, never in part.
func testStepCrash(t *testing.T, c Crashable) {
	ctx := context.Background()
	s := c.Store
	must(t, s.CreateApp(ctx, store.App{Key: "app"}))
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3", "dev-4")
	b := newBroadcast("app", 100)
	b.Targets = 4
	must(t, s.CreateBroadcast(ctx, b, [][]string{{"dev-1", "dev-2"}, {"dev-3", "dev-4"}}, 0, nil))
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(1, "app", "dev-1", store.StatePending), batchMsg(2, "app", "dev-2", store.StatePending),
	}, nil, &store.BroadcastStep{AppKey: "app", ID: 100})
	must(t, err)
	must(t, s.Barrier(ctx))
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(3, "app", "dev-3", store.StatePending), batchMsg(4, "app", "dev-4", store.StatePending),
	}, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 1, Done: true})
	must(t, err)
	r := c.Crash(t)
	b, err = r.GetBroadcast(ctx, "app", 100)
	must(t, err)
	must(t, checkPending(r, "app", "dev-1", 1))
	must(t, checkPending(r, "app", "dev-2", 2))
	wantTargets(t, r, "app", 100, 0, nil)
	switch b.Chunk {
	case 1:
		if b.Queued != 2 || b.State != store.BroadcastFanningOut {
			t.Fatalf("after the first step: %+v", b)
		}
		must(t, checkPending(r, "app", "dev-3"))
		must(t, checkPending(r, "app", "dev-4"))
		wantTargets(t, r, "app", 100, 1, []string{"dev-3", "dev-4"})
	case 2:
		if b.Queued != 4 || b.State != store.BroadcastDone {
			t.Fatalf("after the second step: %+v", b)
		}
		must(t, checkPending(r, "app", "dev-3", 3))
		must(t, checkPending(r, "app", "dev-4", 4))
		wantTargets(t, r, "app", 100, 1, nil)
	default:
		t.Fatalf("the step made durable by a barrier was lost: %+v", b)
	}
}

// testBatchCrash checks that a batch send is durable when CreateMessages
// returns, seq_no entry included.
func testBatchCrash(t *testing.T, c Crashable) {
	ctx := context.Background()
	s := c.Store
	must(t, s.CreateApp(ctx, store.App{Key: "app"}))
	mustDevices(t, s, "app", "dev-1", "dev-2")
	seq := &store.BatchSeq{SeqNo: 9, Entry: store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: future()}, Prefix: []byte("["), Suffix: []byte("]")}
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(1, "app", "dev-1", store.StatePending), batchMsg(2, "app", "dev-2", store.StatePending),
	}, seq, nil)
	must(t, err)
	r := c.Crash(t)
	must(t, checkPending(r, "app", "dev-1", 1))
	must(t, checkPending(r, "app", "dev-2", 2))
	if _, err := r.GetSeq(ctx, "app", 9); err != nil {
		t.Fatalf("seq_no entry after the crash: %v", err)
	}
}

// testBroadcastStepEpoch: a step whose epoch was taken before one of its
// devices was deleted still gives that device nothing (a store may skip
// reading the devices only while the epoch is unchanged).
func testBroadcastStepEpoch(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3")
	must(t, s.CreateBroadcast(ctx, newBroadcast("app", 100), someTargets, 0, nil))
	epoch, ok := flagEpoch(s)
	must(t, s.DeleteDevice(ctx, "app", "dev-2"))
	out, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(101, "app", "dev-1", store.StatePending), batchMsg(102, "app", "dev-2", store.StatePending),
	}, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0, Epoch: epoch, EpochOK: ok})
	must(t, err)
	if !slices.Equal(out, []int{store.BatchStored, store.BatchGone}) {
		t.Fatalf("outcomes %v, want the deleted device's message gone", out)
	}
	_, err = s.GetMessage(ctx, "app", 102)
	wantErr(t, "message to a device deleted after the step's epoch", err, store.ErrNotFound)
}

// testBatchSeqEpoch: a batch send whose epoch was taken before one of
// its devices was deleted still gives that device nothing, and keeps
// the others' messages and the seq_no (a store may skip reading the
// devices only while the epoch is unchanged).
func testBatchSeqEpoch(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2")
	epoch, ok := flagEpoch(s)
	must(t, s.DeleteDevice(ctx, "app", "dev-2"))
	seq := &store.BatchSeq{SeqNo: 5, Entry: store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: future()},
		Prefix: []byte("["), Suffix: []byte("]"), Epoch: epoch, EpochOK: ok}
	out, err := s.CreateMessages(ctx, "app", []store.BatchMessage{
		batchMsg(101, "app", "dev-1", store.StatePending), batchMsg(102, "app", "dev-2", store.StatePending),
	}, seq, nil)
	must(t, err)
	if !slices.Equal(out, []int{store.BatchStored, store.BatchGone}) {
		t.Fatalf("outcomes %v, want the deleted device's message gone", out)
	}
	_, err = s.GetMessage(ctx, "app", 102)
	wantErr(t, "message to a device deleted after the batch's epoch", err, store.ErrNotFound)
	must(t, checkPending(s, "app", "dev-1", 101))
	e, err := s.GetSeq(ctx, "app", 5)
	must(t, err)
	if want := `[{"id":101,"o":"stored"},{"id":102,"o":"gone"}]`; string(e.Body) != want {
		t.Fatalf("seq entry %s, want %s", e.Body, want)
	}
}

// testBroadcastStepPrepared: a step written with what PrepareStep
// returned counts the sends made to its devices after PrepareStep (a
// store may read the pending counts ahead only if it reads again those
// that changed): one fills dev-1's queue, so the step's message to it is
// stored as queue-full, and dev-2's queue keeps both.
func testBroadcastStepPrepared(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1", "dev-2", "dev-3")
	must(t, s.CreateBroadcast(ctx, newBroadcast("app", 100), someTargets, 0, nil))
	var fill []store.BatchMessage
	for i := int64(1); i < store.MaxPending; i++ {
		fill = append(fill, batchMsg(i, "app", "dev-1", store.StatePending))
	}
	_, err := s.CreateMessages(ctx, "app", fill, nil, nil)
	must(t, err)
	msgs := []store.BatchMessage{batchMsg(2001, "app", "dev-1", store.StatePending), batchMsg(2002, "app", "dev-2", store.StatePending)}
	prepared, err := prepareStep(ctx, s, "app", msgs, []bool{false, true})
	must(t, err)
	must(t, s.CreateMessage(ctx, msg(1500, "app", "dev-1", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(1501, "app", "dev-2", store.StatePending), 0, nil))
	epoch, ok := flagEpoch(s)
	out, err := s.CreateMessages(ctx, "app", msgs, nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0, Epoch: epoch, EpochOK: ok, Prepared: prepared})
	must(t, err)
	if !slices.Equal(out, []int{store.BatchFull, store.BatchStored}) {
		t.Fatalf("outcomes %v, want dev-1's queue full and dev-2's message stored", out)
	}
	p, err := s.PendingMessages(ctx, "app", "dev-1", store.MaxPending+10)
	must(t, err)
	if len(p) != store.MaxPending {
		t.Fatalf("dev-1 has %d pending, want %d", len(p), store.MaxPending)
	}
	must(t, checkPending(s, "app", "dev-2", 1501, 2002))
	// Both sends are counted: dev-2 takes MaxPending-2 more, not -1.
	fill = fill[:0]
	for i := int64(3001); i < 3001+store.MaxPending-1; i++ {
		fill = append(fill, batchMsg(i, "app", "dev-2", store.StatePending))
	}
	out, err = s.CreateMessages(ctx, "app", fill, nil, nil)
	must(t, err)
	if out[len(out)-2] != store.BatchStored || out[len(out)-1] != store.BatchFull {
		t.Fatalf("dev-2's last two outcomes %v, want stored then full", out[len(out)-2:])
	}
}

// flagEpoch returns s's flag epoch where s offers one (an optional
// method outside the contract; see store.BroadcastStep's Epoch), and ok
// false, as a store that cannot tell, where it does not.
func flagEpoch(s store.Store) (uint64, bool) {
	if fe, ok := s.(interface{ FlagEpoch() (uint64, bool) }); ok {
		return fe.FlagEpoch()
	}
	return 0, false
}

// prepareStep returns what s's optional PrepareStep makes of msgs (see
// store.BroadcastStep's Prepared), nil where s has none.
func prepareStep(ctx context.Context, s store.Store, appKey string, msgs []store.BatchMessage, connected []bool) (any, error) {
	if ps, ok := s.(interface {
		PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
	}); ok {
		return ps.PrepareStep(ctx, appKey, msgs, connected)
	}
	return nil, nil
}
