package delivery

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// windowedConn is a device connection with a window of one unacknowledged
// command (an MQTT 5 Receive Maximum of 1), as broker.Session keeps it.
type windowedConn struct {
	cmdConn
	mu       sync.Mutex
	inflight int
	last     uint16 // the packet id of the command in flight
	waiting  int
}

func (c *windowedConn) ReceiveMaximum() int { return 1 }

func (c *windowedConn) PublishRequestWithin(limit int, waited bool, topic string, payload []byte, _ string, _ []byte) (uint16, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight >= limit {
		if !waited {
			c.waiting++
		}
		return 0, false, nil
	}
	if waited {
		c.waiting--
	}
	pid, err := c.Publish(topic, payload, 1)
	c.inflight++
	c.last = pid
	return pid, true, err
}

func (c *windowedConn) WaitRequest()   { c.mu.Lock(); c.waiting++; c.mu.Unlock() }
func (c *windowedConn) UnwaitRequest() { c.mu.Lock(); c.waiting--; c.mu.Unlock() }

// ack takes the PUBACK of the command in flight off the window, as the
// broker does before it tells the sender, and returns its packet id.
func (c *windowedConn) ack() uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	return c.last
}

// readCounting counts the commands a CommandStore reads.
type readCounting struct {
	CommandStore
	read atomic.Int64
}

func (s *readCounting) OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error) {
	cmds, err := s.CommandStore.OpenCommands(ctx, appKey, device, limit)
	s.read.Add(int64(len(cmds)))
	return cmds, err
}

func (s *readCounting) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	s.read.Add(1)
	return s.CommandStore.GetCommand(ctx, appKey, id)
}

// Commands waiting for a device's window go one per PUBACK, in order,
// and each is read about once: a device with a window of one and 100
// large commands waiting must not cost the server 100 reads of all of
// them.
func TestWaitingCommandsReadOnce(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	svc := offlineCommands(t, st, st, "dev-1")
	const n = 40
	for range n {
		rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{"dev-1"}, command.Request{Name: "ota", TTL: 60, Timeout: 30}, true, 0, nil)
		if err != nil || rs[0].Command.State != store.CmdQueued {
			t.Fatalf("send: %+v %v", rs, err)
		}
	}
	counting := &readCounting{CommandStore: st}
	cs := NewCommandSender(counting, svc, slog.New(slog.DiscardHandler))
	c := &windowedConn{}
	cs.Attach(ctx, c, "app", "dev-1", false)
	if got := len(c.got()); got != 1 {
		t.Fatalf("sent %d commands into a window of 1", got)
	}
	for i := 1; i < n; i++ {
		cs.Acked(c, "app", "dev-1", c.ack())
		if got := len(c.got()); got != i+1 {
			t.Fatalf("after %d PUBACKs %d commands sent, want %d", i, got, i+1)
		}
	}
	// Attach reads the device's open commands once (n), then each
	// PUBACK reads the one it sends.
	if got := counting.read.Load(); got > 3*n {
		t.Errorf("%d commands read to send %d one at a time, want about %d", got, n, 2*n)
	}
	cs.acks.flush()
}

// A device that drops its subscription to cmd while commands wait for
// its window gets none of them at the next PUBACK: they stay queued, and
// its next subscription sends them, in order.
func TestWaitingCommandsStayQueuedOnUnsubscribe(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	svc := offlineCommands(t, st, st, "dev-1")
	var ids []int64
	for range 4 {
		rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{"dev-1"}, command.Request{Name: "ota", TTL: 60, Timeout: 30}, true, 0, nil)
		if err != nil || rs[0].Command.State != store.CmdQueued {
			t.Fatalf("send: %+v %v", rs, err)
		}
		ids = append(ids, rs[0].Command.ID)
	}
	cs := NewCommandSender(st, svc, slog.New(slog.DiscardHandler))
	c := &windowedConn{}
	cs.Attach(ctx, c, "app", "dev-1", false)
	cs.Unsubscribe(c, "app", "dev-1")
	cs.Acked(c, "app", "dev-1", c.ack())
	if got := len(c.got()); got != 1 {
		t.Fatalf("%d commands sent after the device unsubscribed, want the 1 sent before", got)
	}
	if c.waiting != 0 {
		t.Errorf("%d requests still counted waiting for the window", c.waiting)
	}
	for _, id := range ids[1:] {
		if cmd, err := st.GetCommand(ctx, "app", id); err != nil || cmd.State != store.CmdQueued {
			t.Errorf("command %d: %+v %v, want queued", id, cmd, err)
		}
	}
	cs.Attach(ctx, c, "app", "dev-1", false) // subscribed again
	want := []string{command.TopicCmd, command.TopicCmd}
	checkTopics(t, "resubscribed", c.got(), want)
	if got := c.got(); len(got) == 2 && !strings.Contains(got[1], strconv.FormatInt(ids[1], 10)) {
		t.Errorf("resubscribed: sent %q, want command %d next", got[1], ids[1])
	}
	cs.acks.flush()
}

// stuckConn is a device that stopped reading: a publish to it blocks
// (as a socket write does, up to the broker's write timeout) until
// released.
type stuckConn struct {
	cmdConn
	entered chan struct{}
	release chan struct{}
}

func (c *stuckConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	c.entered <- struct{}{}
	<-c.release
	return c.cmdConn.Publish(topic, payload, qos)
}

// A send blocked on one device's socket holds up no other device's
// sends: 200 other devices (more than enough to share any fixed set of
// locks with the stuck one) get theirs while it is blocked.
func TestStuckDeviceHoldsUpNoOther(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	names := []string{"stuck"}
	for i := range 200 {
		names = append(names, "dev-"+strconv.Itoa(i))
	}
	svc := offlineCommands(t, st, st, names...)
	cmds := map[string]store.Command{}
	for _, name := range names {
		rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{name}, command.Request{Name: "ota", TTL: 60, Timeout: 30}, true, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		cmds[name] = rs[0].Command
	}
	cs := NewCommandSender(st, svc, slog.New(slog.DiscardHandler))
	stuck := &stuckConn{entered: make(chan struct{}), release: make(chan struct{})}
	go cs.Send(ctx, stuck, cmds["stuck"])
	<-stuck.entered
	done := make(chan struct{})
	go func() {
		for _, name := range names[1:] {
			cs.Send(ctx, &cmdConn{}, cmds[name])
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("sends to other devices waited for the stuck one")
	}
	close(stuck.release)
	<-done
	cs.acks.flush()
}
