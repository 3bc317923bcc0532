package command_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// online is a Router whose devices are all connected: it records the
// commands it is given, as delivery would receive them.
type online struct {
	mu        sync.Mutex
	notified  []int64
	cancelled []int64
}

func (o *online) CommandOnline(store.Device) bool { return true }
func (o *online) NotifyCommand(c store.Command, _ store.Device) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notified = append(o.notified, c.ID)
}
func (o *online) CancelCommand(c store.Command) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cancelled = append(o.cancelled, c.ID)
}

type fixture struct {
	st     *memory.Store
	svc    *command.Service
	router *online
	app    store.App
	now    time.Time
	mu     sync.Mutex
}

func newFixture(t *testing.T, devices ...string) *fixture {
	t.Helper()
	f := &fixture{st: memory.New(), router: &online{}, app: store.App{Key: "app"}, now: time.UnixMilli(1_800_000_000_000)}
	ctx := context.Background()
	if err := f.st.CreateApp(ctx, f.app); err != nil {
		t.Fatal(err)
	}
	var devs []store.Device
	for _, d := range devices {
		devs = append(devs, store.Device{AppKey: "app", Name: d})
	}
	if _, err := f.st.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	ids, err := idgen.New(0)
	if err != nil {
		t.Fatal(err)
	}
	f.svc = command.NewService(f.st, ids, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.svc.SetRouter(f.router)
	f.svc.SetClock(f.clock)
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *fixture) send(t *testing.T, dev string, req command.Request) store.Command {
	t.Helper()
	rs, err := f.svc.Send(context.Background(), f.app, []string{dev}, req, true, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].Command
}

func TestAnswerWakesWaiterAndFirstWins(t *testing.T) {
	f := newFixture(t, "d1", "d2")
	ctx := context.Background()
	c := f.send(t, "d1", command.Request{Name: "ping", Timeout: 30})
	if c.State != store.CmdQueued || len(f.router.notified) != 1 {
		t.Fatalf("sent: %+v, notified %v", c, f.router.notified)
	}
	done := make(chan []store.Command, 1)
	go func() {
		out, err := f.svc.Wait(ctx, "app", []store.Command{c}, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	if err := f.svc.Delivered(ctx, "app", "d1", c.ID); err != nil {
		t.Fatal(err)
	}
	// Another device cannot answer it.
	if took, err := f.svc.Answer(ctx, "app", "d2", command.Reply{ID: c.ID}); took || err != nil {
		t.Fatalf("another device's answer: %v %v", took, err)
	}
	if took, err := f.svc.Answer(ctx, "app", "d1", command.Reply{ID: c.ID, Code: 5, Message: "no"}); !took || err != nil {
		t.Fatalf("answer: %v %v", took, err)
	}
	out := <-done
	if out[0].State != store.CmdFailed || out[0].Code != 5 {
		t.Fatalf("waiter woke with %+v", out[0])
	}
	if took, _ := f.svc.Answer(ctx, "app", "d1", command.Reply{ID: c.ID}); took {
		t.Fatal("a second answer was taken")
	}
	if took, _ := f.svc.Answer(ctx, "app", "d1", command.Reply{ID: 424242}); took {
		t.Fatal("an answer to an unknown command was taken")
	}
	if got := f.svc.Dropped(); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
}

func TestSweepOnServerClock(t *testing.T) {
	f := newFixture(t, "d1")
	ctx := context.Background()
	undelivered := f.send(t, "d1", command.Request{Name: "a", TTL: 10, Timeout: 5})
	delivered := f.send(t, "d1", command.Request{Name: "b", TTL: 10, Timeout: 5})
	if err := f.svc.Delivered(ctx, "app", "d1", delivered.ID); err != nil {
		t.Fatal(err)
	}
	f.advance(4 * time.Second)
	if _, err := f.svc.ReportProgress(ctx, "app", "d1", command.Progress{ID: delivered.ID, Progress: 50}); err != nil {
		t.Fatal(err)
	}
	f.advance(4 * time.Second) // 8 s: progress moved the deadline to 9 s
	must(t, f.svc.Sweep(ctx))
	if c, _ := f.svc.Get(ctx, "app", delivered.ID); c.State != store.CmdInProgress || c.Progress != 50 {
		t.Fatalf("before its deadline: %+v", c)
	}
	f.advance(2 * time.Second) // 10 s
	must(t, f.svc.Sweep(ctx))
	if c, _ := f.svc.Get(ctx, "app", delivered.ID); c.State != store.CmdTimedOut {
		t.Fatalf("after its deadline: %+v", c)
	}
	if c, _ := f.svc.Get(ctx, "app", undelivered.ID); c.State != store.CmdQueued {
		t.Fatalf("before ttl and grace: %+v", c)
	}
	f.advance(3 * time.Second) // 13 s: ttl 10 s plus the grace
	must(t, f.svc.Sweep(ctx))
	if c, _ := f.svc.Get(ctx, "app", undelivered.ID); c.State != store.CmdExpired || c.TimeDone == 0 {
		t.Fatalf("after its ttl: %+v", c)
	}
	p, err := f.st.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 10})
	must(t, err)
	var types []string
	for _, e := range p.Events {
		types = append(types, e.Type)
	}
	if len(types) != 3 || types[0] != command.EventProgress || types[1] != command.EventDone || types[2] != command.EventDone {
		t.Fatalf("events %v", types)
	}
}

func TestCancelAndDeviceGone(t *testing.T) {
	f := newFixture(t, "d1")
	ctx := context.Background()
	queued := f.send(t, "d1", command.Request{Name: "a", TTL: 60, Timeout: 5})
	sent := f.send(t, "d1", command.Request{Name: "b", TTL: 60, Timeout: 5})
	held := f.send(t, "d1", command.Request{Name: "c", TTL: 60, Timeout: 5})
	_, err := f.svc.Sent(ctx, "app", sent.ID)
	must(t, err)
	must(t, f.svc.Delivered(ctx, "app", "d1", held.ID))
	c, err := f.svc.Cancel(ctx, "app", queued.ID)
	if err != nil || c.State != store.CmdCancelled || len(f.router.cancelled) != 0 {
		t.Fatalf("cancel a queued command: %+v %v, device told %v", c, err, f.router.cancelled)
	}
	if c, _ := f.svc.Cancel(ctx, "app", queued.ID); c.State != store.CmdCancelled {
		t.Fatalf("cancel again: %+v", c)
	}
	if _, err := f.svc.Cancel(ctx, "other", sent.ID); err == nil {
		t.Fatal("another app cancelled the command")
	}
	must(t, f.svc.DeviceGone(ctx, "app", "d1", store.CodeDeviceDisabled))
	if c, _ := f.svc.Get(ctx, "app", sent.ID); c.State != store.CmdRejected || c.Code != store.CodeDeviceDisabled {
		t.Fatalf("an undelivered command of a disabled device: %+v", c)
	}
	if c, _ := f.svc.Get(ctx, "app", held.ID); c.State != store.CmdDelivered {
		t.Fatalf("a delivered command of a disabled device: %+v, want delivered until its timeout", c)
	}
	if c, err := f.svc.Cancel(ctx, "app", held.ID); err != nil || c.State != store.CmdCancelled || len(f.router.cancelled) != 1 {
		t.Fatalf("cancel a delivered command: %+v %v, device told %v", c, err, f.router.cancelled)
	}
}

func TestParseReply(t *testing.T) {
	for _, c := range []struct {
		payload, corr string
		id            int64
		code          int
		bad           bool
	}{
		{`{"cmd_id":"12","code":3,"result":{"a":1}}`, "", 12, 3, false},
		{`{"cmd_id":12,"code":0}`, "", 12, 0, false},
		{`{"cmd_id":12}`, "", 0, 0, true},
		{`{"cmd_id":"12","code":null,"message":"disk full"}`, "", 0, 0, true},
		{`{"code":0}`, "77", 77, 0, false},
		{`{"code":0}`, "", 0, 0, true},
		{`{"cmd_id":"x"}`, "", 0, 0, true},
		{`[]`, "", 0, 0, true},
	} {
		r, err := command.ParseReply([]byte(c.payload), []byte(c.corr))
		if (err != nil) != c.bad || !c.bad && (r.ID != c.id || r.Code != c.code) {
			t.Errorf("ParseReply(%s, %q) = %+v, %v", c.payload, c.corr, r, err)
		}
	}
	if _, err := command.ParseProgress([]byte(`{"cmd_id":"1","progress":101}`), nil); err == nil {
		t.Error("progress 101 accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A wait that runs out answers each command as it is then: a command
// delivered while the call waited shows delivered, not sent.
func TestWaitRunningOutAnswersTheStateNow(t *testing.T) {
	f := newFixture(t, "d1")
	ctx := context.Background()
	c := f.send(t, "d1", command.Request{Name: "slow", Timeout: 30})
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := f.svc.Delivered(ctx, "app", "d1", c.ID); err != nil {
			t.Error(err)
		}
	}()
	got, err := f.svc.Wait(ctx, "app", []store.Command{c}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].State != store.CmdDelivered || got[0].TimeDelivered == 0 {
		t.Fatalf("after the wait: %+v, want delivered with its time", got[0])
	}
}
