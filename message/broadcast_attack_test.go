package message

// Tests from an outside tester. Each failed on the code it was written
// against and shows a violation of the broadcast contract of docs/api.md
// ("Broadcast"), or a poll load it allowed.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// broadcastMessages returns the app's messages of broadcast id.
func broadcastMessages(t *testing.T, st BroadcastStore, id int64) []store.Message {
	t.Helper()
	ms, err := st.ListMessages(context.Background(), "app", math.MaxInt64, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Message
	for _, m := range ms {
		if m.Broadcast == id {
			out = append(out, m)
		}
	}
	return out
}

// TestBroadcastRecreatedDeviceIsNotATarget: a target deleted
// between the 200 and the fan-out, then created again with the same name
// (untagged), is a device created after the answer: docs/api.md says it
// is not a target. The fan-out goes by name only and gives the new
// device the message.
func TestBroadcastRecreatedDeviceIsNotATarget(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	if _, err := f.st.UpdateDevice(ctx, "app", "dev-1", func(d *store.Device) error {
		d.Tags = []string{"lamp"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	br := NewBroadcaster(f.svc, f.st, FanoutConfig{Chunk: 1, Poll: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	b, err := br.Create(ctx, f.app, Target{Tag: "lamp"}, SendRequest{Body: "fw", TTL: 60}, 0, func(int64, int64) *store.SeqEntry { return nil })
	if err != nil || b.Targets != 1 {
		t.Fatalf("create: %+v %v", b, err)
	}
	// After the 200, before the fan-out: the device is deleted and a new
	// one, without the tag, takes its name.
	if err := f.st.DeleteDevice(ctx, "app", "dev-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "new", TimeCreate: time.Now().Unix() + 1}}); err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	eventually(t, "the broadcast to be done", func() bool {
		got, err := f.st.GetBroadcast(ctx, "app", b.ID)
		return err == nil && got.State == store.BroadcastDone
	})
	for _, m := range broadcastMessages(t, f.st, b.ID) {
		t.Errorf("the new, untagged %s created after the 200 got broadcast message %d (state %s); want none", m.DeviceName, m.ID, m.State)
	}
}

// countingStore counts the counts of a broadcast's messages and makes
// each slow, as a count of a large broadcast is on a loaded node.
type countingStore struct {
	BroadcastStore
	calls atomic.Int64
}

func (s *countingStore) CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (store.BroadcastCounts, error) {
	s.calls.Add(1)
	time.Sleep(300 * time.Millisecond) // a count takes 300 ms, so it is cached
	return s.BroadcastStore.CountBroadcast(ctx, appKey, id, first, last)
}

// TestBroadcastConcurrentPollsShareACount (found by an outside tester):
// docs/api.md says a large
// broadcast's count "is reused for a few seconds", so that polls cost
// little. Concurrent polls that arrive while no count is cached each
// count every message themselves: 10 polls read the messages 10 times.
// Black-box, 50 concurrent GETs of a 100,000-device broadcast took 68
// CPU-seconds and 49 of them got no answer (report, finding 3).
func TestBroadcastConcurrentPollsShareACount(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	var devs []store.Device
	for i := range 999 {
		devs = append(devs, store.Device{Name: fmt.Sprintf("dev-x%04d", i), Secret: "s"})
	}
	if _, err := f.st.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	br := NewBroadcaster(f.svc, f.st, FanoutConfig{Chunk: 1000, Poll: 20 * time.Millisecond}, log)
	b, err := br.Create(ctx, f.app, Target{All: true}, SendRequest{Body: "b", TTL: 60}, 0, func(int64, int64) *store.SeqEntry { return nil })
	if err != nil || b.Targets != 1000 {
		t.Fatalf("create: %+v %v", b, err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the broadcast to be done", func() bool {
		got, err := f.st.GetBroadcast(ctx, "app", b.ID)
		return err == nil && got.State == store.BroadcastDone
	})
	br.Stop()
	cs := &countingStore{BroadcastStore: f.st}
	polled := NewBroadcaster(f.svc, cs, FanoutConfig{}, log)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := polled.Get(ctx, "app", b.ID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := cs.calls.Load(); got > 2 {
		t.Fatalf("10 concurrent polls counted the messages %d times; want at most 2", got)
	}
}

// disablingStore disables dev-1 the way PATCH flag=1 does (the flag, then
// its pending messages failed) right after the fan-out read the chunk's
// devices (or, with no flag changed since the broadcast was accepted,
// found them unchanged without reading them), before it writes their
// messages.
type disablingStore struct {
	*pebble.Store
	f    *fixture
	done bool
}

func (s *disablingStore) GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error) {
	devs, err := s.Store.GetDevices(ctx, appKey, names)
	if err != nil {
		return devs, err
	}
	return devs, s.disable(ctx, appKey)
}

func (s *disablingStore) PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error) {
	if err := s.disable(ctx, appKey); err != nil {
		return nil, err
	}
	return s.Store.PrepareStep(ctx, appKey, msgs, connected)
}

// disable disables dev-1 the first time it is called.
func (s *disablingStore) disable(ctx context.Context, appKey string) error {
	if s.done {
		return nil
	}
	s.done = true
	if _, err := s.Store.UpdateDevice(ctx, appKey, "dev-1", func(d *store.Device) error {
		d.Flag = store.FlagDisabled
		return nil
	}); err != nil {
		return err
	}
	return s.f.d.FailPending(ctx, appKey, "dev-1", ErrCodeDeviceDisabled, "device disabled")
}

// TestBroadcastDisabledMidChunkNotLeftPending (found by an outside
// tester): a target disabled while
// the fan-out makes its chunk ends disabled with its broadcast message
// pending, when docs/api.md says a target disabled before the fan-out
// reaches it gets its message failed (3003), and a disabled device holds
// no pending message. Black-box, 26 of 10,000 devices disabled during a
// 20,000-device broadcast ended so (report, finding 2).
func TestBroadcastDisabledMidChunkNotLeftPending(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	st := &disablingStore{Store: f.st, f: f}
	br := NewBroadcaster(f.svc, st, FanoutConfig{Chunk: 10, Poll: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	b, err := br.Create(ctx, f.app, Target{All: true}, SendRequest{Body: "fw", TTL: 60}, 0, func(int64, int64) *store.SeqEntry { return nil })
	if err != nil || b.Targets != 1 {
		t.Fatalf("create: %+v %v", b, err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Stop()
	eventually(t, "the broadcast to be done", func() bool {
		got, err := f.st.GetBroadcast(ctx, "app", b.ID)
		return err == nil && got.State == store.BroadcastDone
	})
	d, err := f.st.GetDevice(ctx, "app", "dev-1")
	if err != nil || d.Flag != store.FlagDisabled {
		t.Fatalf("dev-1: %+v %v, want disabled", d, err)
	}
	for _, m := range broadcastMessages(t, f.st, b.ID) {
		if m.State == store.StatePending {
			t.Errorf("disabled %s holds broadcast message %d pending; want it failed with 3003", m.DeviceName, m.ID)
		}
	}
}

// recreatingStore deletes dev-1 and creates it again, a second later,
// just before a send's message is stored: the send read the old device.
type recreatingStore struct {
	Store
	st *pebble.Store
}

func (s *recreatingStore) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	if err := s.st.DeleteDevice(ctx, m.AppKey, m.DeviceName); err != nil {
		return err
	}
	if _, err := s.st.CreateDevices(ctx, m.AppKey, []store.Device{{Name: m.DeviceName, Secret: "new", TimeCreate: time.Now().Unix() + 1}}); err != nil {
		return err
	}
	return s.Store.CreateMessage(ctx, m, seqNo, seq)
}

// TestSendToRecreatedDeviceFails (suspected by an outside tester): a
// send that read a device which was then deleted and created
// again under its name must not leave its message pending for the new
// device, whose queue starts empty (docs/api.md); it fails with 3007, as
// the delete's sweep would have failed it.
func TestSendToRecreatedDeviceFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.svc.now = time.Now
	f.svc.store = &recreatingStore{Store: f.st, st: f.st}
	dev, err := f.st.GetDevice(ctx, "app", "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.svc.Send(ctx, f.app, dev, SendRequest{Body: "b", TTL: 60}, 0, func(int64) *store.SeqEntry { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.st.GetMessage(ctx, "app", m.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := got.Records[len(got.Records)-1]
	if got.State != store.StateFailed || last.Error == nil || last.Error.Code != ErrCodeDeviceDeleted {
		t.Fatalf("message to the recreated device: %s %+v, want failed with 3007", got.State, got.Records)
	}
}
