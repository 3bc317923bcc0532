package delivery

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// deliveredWrites counts the writes that record a command delivered.
type deliveredWrites struct {
	*memory.Store
	n atomic.Int64
}

func (s *deliveredWrites) UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error) {
	return s.Store.UpdateCommand(ctx, appKey, id, func(c *store.Command) error {
		was := c.State
		err := fn(c)
		if err == nil && was != store.CmdDelivered && c.State == store.CmdDelivered {
			s.n.Add(1)
		}
		return err
	})
}

// TestDeliveredLingers: a PUBACK's delivered state is written no sooner
// than the linger after it, with the PUBACK's time, and not at all when
// the answer came meanwhile (the answer records the delivery). The
// linger is lengthened so that the answer, 50 ms after the PUBACK, comes
// within it on any machine.
func TestDeliveredLingers(t *testing.T) {
	ctx := context.Background()
	st := &deliveredWrites{Store: memory.New()}
	svc := offlineCommands(t, st.Store, st, "dev-1")
	cs := NewCommandSender(st, svc, slog.New(slog.DiscardHandler))
	const linger = 500 * time.Millisecond
	cs.acks.linger = linger
	send := func() int64 {
		t.Helper()
		rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{"dev-1"}, command.Request{Name: "ping", TTL: 60, Timeout: 30}, true, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Command.ID
	}
	get := func(id int64) store.Command {
		t.Helper()
		c, err := st.GetCommand(ctx, "app", id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	answered, unanswered := send(), send()
	c := &cmdConn{}
	cs.Attach(ctx, c, "app", "dev-1", false)
	if got := c.got(); len(got) != 2 {
		t.Fatalf("the device got %q, want its two commands", got)
	}
	acked := time.Now()
	ackedMs := cs.now().UnixMilli()
	if !cs.Acked(c, "app", "dev-1", 1) || !cs.Acked(c, "app", "dev-1", 2) {
		t.Fatal("PUBACKs of the commands not taken")
	}
	time.Sleep(50 * time.Millisecond) // without the linger, both are written by now
	if took, err := svc.Answer(ctx, "app", "dev-1", command.Reply{ID: answered}); !took || err != nil {
		t.Fatalf("answer: took %v, %v", took, err)
	}
	if s := get(unanswered).State; s != store.CmdSent {
		t.Fatalf("the unanswered command is %s 50 ms after its PUBACK, want sent until the linger passed", s)
	}
	for get(unanswered).State != store.CmdDelivered {
		if time.Since(acked) > 5*time.Second {
			t.Fatal("the unanswered command never recorded delivered")
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(acked); d < linger {
		t.Fatalf("delivered state written %v after the PUBACK, before the %v linger", d, linger)
	}
	if u := get(unanswered); u.TimeDelivered < ackedMs || u.TimeDelivered > ackedMs+50 {
		t.Fatalf("time_delivered %d, want the PUBACK's time (%d)", u.TimeDelivered, ackedMs)
	}
	if a := get(answered); a.State != store.CmdSucceeded || a.TimeDelivered == 0 {
		t.Fatalf("the answered command: %s, time_delivered %d; want succeeded with its delivery time", a.State, a.TimeDelivered)
	}
	if n := st.n.Load(); n != 1 {
		t.Fatalf("%d delivered states written, want 1: the answered command's was left to its answer", n)
	}
}

// TestFlushEndsLinger: Flush stores at once the delivered states that
// linger, and returns only once they are stored; the linger here is
// long enough that nothing else would write them during the test.
func TestFlushEndsLinger(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	svc := offlineCommands(t, st, st, "dev-1")
	cs := NewCommandSender(st, svc, slog.New(slog.DiscardHandler))
	cs.acks.linger = time.Hour
	rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{"dev-1"}, command.Request{Name: "ping", TTL: 60, Timeout: 30}, true, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &cmdConn{}
	cs.Attach(ctx, c, "app", "dev-1", false)
	if !cs.Acked(c, "app", "dev-1", 1) {
		t.Fatal("PUBACK of the command not taken")
	}
	done := make(chan struct{})
	go func() { cs.Flush(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Flush waited for the linger")
	}
	if got, err := st.GetCommand(ctx, "app", rs[0].Command.ID); err != nil || got.State != store.CmdDelivered {
		t.Fatalf("after Flush: %s, %v; want delivered", got.State, err)
	}
}
