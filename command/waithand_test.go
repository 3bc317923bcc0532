package command_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// countingStore counts GetCommand calls.
type countingStore struct {
	*memory.Store
	gets atomic.Int64
}

func (s *countingStore) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	s.gets.Add(1)
	return s.Store.GetCommand(ctx, appKey, id)
}

// TestWaitTakesTheEndedCommand checks that a call woken by an end stored
// on this node answers the command as that end stored it, without
// reading it again.
func TestWaitTakesTheEndedCommand(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	st := &countingStore{Store: mem}
	svc, c := pingOn(t, mem, st)
	done := waiting(t, svc, st, c)
	if took, err := svc.Answer(ctx, "app", "d1", command.Reply{ID: c.ID, Result: []byte(`{"ok":true}`)}); !took || err != nil {
		t.Fatalf("answer: %v %v", took, err)
	}
	before := st.gets.Load()
	out := <-done
	if out[0].State != store.CmdSucceeded || string(out[0].Result) != `{"ok":true}` || !out[0].Answered {
		t.Fatalf("waiter woke with %+v", out[0])
	}
	if n := st.gets.Load() - before; n != 0 {
		t.Fatalf("the woken wait read the command %d more times", n)
	}
}

// waiting starts a call of svc, which reads st, waiting up to a minute
// for c, and returns once the call watches c, with the channel that
// takes what the call returns.
func waiting(t *testing.T, svc *command.Service, st *countingStore, c store.Command) <-chan []store.Command {
	t.Helper()
	done := make(chan []store.Command, 1)
	go func() {
		out, err := svc.Wait(context.Background(), "app", []store.Command{c}, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	// The wait reads the command once after it watches it.
	for st.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	return done
}

// pingOn makes a service on st, which keeps its data in mem, creates
// app "app" with device d1 there, and sends d1 a ping (timeout 30 s)
// through the service; it returns the service and the command.
func pingOn(t *testing.T, mem *memory.Store, st command.Store) (*command.Service, store.Command) {
	t.Helper()
	svc, cmds := pingsOn(t, mem, st, 1)
	return svc, cmds[0]
}

// pingsOn is pingOn for devices d1 to dn, with one send to all of them;
// it returns the commands in device order.
func pingsOn(t *testing.T, mem *memory.Store, st command.Store, n int) (*command.Service, []store.Command) {
	t.Helper()
	ctx := context.Background()
	must(t, mem.CreateApp(ctx, store.App{Key: "app"}))
	names := make([]string, n)
	devs := make([]store.Device, n)
	for i := range names {
		names[i] = fmt.Sprintf("d%d", i+1)
		devs[i] = store.Device{AppKey: "app", Name: names[i]}
	}
	_, err := mem.CreateDevices(ctx, "app", devs)
	must(t, err)
	ids, err := idgen.New(0)
	must(t, err)
	svc := command.NewService(st, ids, slog.New(slog.NewTextHandler(io.Discard, nil)))
	svc.SetRouter(&online{})
	rs, err := svc.Send(ctx, store.App{Key: "app"}, names, command.Request{Name: "ping", Timeout: 30}, n == 1, 0, nil)
	must(t, err)
	cmds := make([]store.Command, n)
	for i, r := range rs {
		cmds[i] = r.Command
	}
	return svc, cmds
}

// TestRecheckFindsEndsStoredElsewhere checks that a call waiting for a
// command that another node ended without a word to this one (it died
// before sending its event) wakes at Recheck, and not before: Recheck
// of an open command wakes nobody.
func TestRecheckFindsEndsStoredElsewhere(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	st := &countingStore{Store: mem}
	svc, c := pingOn(t, mem, st)
	ids, err := idgen.New(1)
	must(t, err)
	elsewhere := command.NewService(mem, ids, slog.New(slog.NewTextHandler(io.Discard, nil)))
	elsewhere.SetRouter(&online{})

	done := waiting(t, svc, st, c)
	svc.Recheck(ctx)
	if took, err := elsewhere.Answer(ctx, "app", "d1", command.Reply{ID: c.ID, Result: []byte(`"there"`)}); !took || err != nil {
		t.Fatalf("answer: %v %v", took, err)
	}
	select {
	case out := <-done:
		t.Fatalf("the wait returned before Recheck: %+v", out[0])
	case <-time.After(100 * time.Millisecond):
	}
	svc.Recheck(ctx)
	select {
	case out := <-done:
		if out[0].State != store.CmdSucceeded || string(out[0].Result) != `"there"` {
			t.Fatalf("the wait returned %+v", out[0])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recheck did not wake the call")
	}
}
