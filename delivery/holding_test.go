package delivery

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// allRecConn is a conn that sends several messages at once, and records
// how many each call sent.
type allRecConn struct {
	conn
	mu    sync.Mutex
	calls []int
}

func (c *allRecConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	c.mu.Lock()
	c.calls = append(c.calls, 1)
	c.mu.Unlock()
	return c.conn.Publish(topic, payload, qos)
}

func (c *allRecConn) PublishAll(topic string, payloads [][]byte, qos byte) ([]uint16, error) {
	c.mu.Lock()
	c.calls = append(c.calls, len(payloads))
	c.mu.Unlock()
	var ids []uint16
	for _, p := range payloads {
		id, err := c.conn.Publish(topic, p, qos)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (c *allRecConn) writes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// TestDispatcherSendsAnnouncedAfterPUBACKsInOneWrite checks that the
// messages announced while one is in flight wait for its PUBACK and then
// go out with one write, in msgid order.
func TestDispatcherSendsAnnouncedAfterPUBACKsInOneWrite(t *testing.T) {
	f := newFixture(t)
	f.d.maxHold = time.Hour // the PUBACK, not the bound, ends the hold here
	c := &allRecConn{}
	f.d.Attach(c, "app", "dev-1")
	idle := f.idle
	eventually(t, "the first flush done", idle)
	first := f.send(t, 60)
	eventually(t, "the first message sent", func() bool { return len(c.received()) == 1 && idle() })
	var later []int64
	for range 3 {
		later = append(later, f.send(t, 60))
		eventually(t, "the flush done", idle)
	}
	if got := c.received(); !slices.Equal(got, []int64{first}) {
		t.Fatalf("received %v before the PUBACK, want only %d", got, first)
	}
	c.mu.Lock()
	pid := c.pids[first]
	c.mu.Unlock()
	f.d.Acked(c, "app", "dev-1", pid)
	eventually(t, "the held messages sent", func() bool { return len(c.received()) == 4 })
	if got, want := c.received(), append([]int64{first}, later...); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	if got := c.writes(); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("messages per write %v, want [1 3]", got)
	}
}

// oneInFlight is a fixture with a hold of 20 ms whose dev-1 is attached
// on a connection that batches, with one message, first, in flight.
func oneInFlight(t *testing.T) (f *fixture, c *allRecConn, first int64) {
	t.Helper()
	f = newFixture(t)
	f.d.maxHold = 20 * time.Millisecond
	c = &allRecConn{}
	f.d.Attach(c, "app", "dev-1")
	first = f.send(t, 60)
	eventually(t, "the first message sent", func() bool { return len(c.received()) == 1 })
	return f, c, first
}

// TestHeldMessagesGoWithoutPUBACK checks that the hold is bounded: a
// device that never acknowledges its first message still gets the
// messages sent after it, together, without a PUBACK or a queue read.
func TestHeldMessagesGoWithoutPUBACK(t *testing.T) {
	f, c, first := oneInFlight(t)
	later := []int64{f.send(t, 60), f.send(t, 60)}
	eventually(t, "the held messages sent without a PUBACK", func() bool { return len(c.received()) == 3 })
	if got, want := c.received(), append([]int64{first}, later...); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}

// TestPendingGoInOneWrite checks that a device that subscribes with
// messages pending gets them, in send order, with one write.
func TestPendingGoInOneWrite(t *testing.T) {
	f := newFixture(t)
	sent := f.sendN(t, 5)
	c := &allRecConn{}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "the pending messages sent", func() bool { return len(c.received()) == len(sent) })
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v", got, sent)
	}
	if got := c.writes(); !slices.Equal(got, []int{len(sent)}) {
		t.Errorf("messages per write %v, want all %d in one", got, len(sent))
	}
}

// recvMaxConn is an allRecConn whose device declared a Receive Maximum.
type recvMaxConn struct {
	allRecConn
	max int
}

func (c *recvMaxConn) ReceiveMaximum() int { return c.max }

// TestReceiveMaximumBoundsTheWindow checks that a device that declared a
// Receive Maximum below Window has no more messages unacknowledged than
// that, before and after its PUBACKs [MQTT-3.3.4-9].
func TestReceiveMaximumBoundsTheWindow(t *testing.T) {
	f := newFixture(t)
	sent := f.sendN(t, 12)
	c := &recvMaxConn{max: 5}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "the first messages sent", func() bool { return len(c.received()) == 5 && f.idle() })
	time.Sleep(50 * time.Millisecond)
	if got := c.received(); !slices.Equal(got, sent[:5]) {
		t.Fatalf("received %v before any PUBACK, want the first 5 of %d", got, len(sent))
	}
	f.ackOn(t, c, &c.conn, sent[0])
	f.ackOn(t, c, &c.conn, sent[1])
	eventually(t, "two more sent", func() bool { return len(c.received()) == 7 && f.idle() })
	time.Sleep(50 * time.Millisecond)
	if got := c.received(); !slices.Equal(got, sent[:7]) {
		t.Fatalf("received %v after 2 PUBACKs, want the first 7", got)
	}
	late := f.send(t, 60) // announced while the window is full
	eventually(t, "the flush done", f.idle)
	if n := len(c.received()); n != 7 {
		t.Fatalf("%d received with 5 unacknowledged, want 7", n)
	}
	for _, id := range append(sent[2:], late) {
		f.ackOn(t, c, &c.conn, id)
	}
	if got := c.received(); !slices.Equal(got, append(sent, late)) {
		t.Fatalf("received %v, want every message once in order", got)
	}
}

// TestPUBACKAfterUnsubscribeCounts checks that a device that unsubscribes
// from msg with messages in flight, and then acknowledges them, has them
// delivered, not sent again when it subscribes anew; and that nothing is
// sent to it while it is unsubscribed, not even what a hold kept back.
func TestPUBACKAfterUnsubscribeCounts(t *testing.T) {
	f, c, first := oneInFlight(t)
	held := f.send(t, 60) // held for the first one's PUBACK (hold)
	f.d.Unsubscribe(c, "app", "dev-1")
	time.Sleep(3 * f.d.maxHold)
	if got := c.received(); !slices.Equal(got, []int64{first}) {
		t.Fatalf("received %v after unsubscribing, want only %d, sent before", got, first)
	}
	f.ackOn(t, c, &c.conn, first)
	eventually(t, "the PUBACK after UNSUBSCRIBE stored", func() bool { st, _ := f.state(t, first); return st == store.StateDelivered })
	f.d.Attach(c, "app", "dev-1") // subscribed anew
	eventually(t, "the held message sent", func() bool { return len(c.received()) == 2 })
	time.Sleep(50 * time.Millisecond)
	if got := c.received(); !slices.Equal(got, []int64{first, held}) {
		t.Fatalf("received %v, want %d once and then %d", got, first, held)
	}
}

// TestExpiredInFlightKeepsItsPlaceUnderReceiveMaximum checks that for a
// device that declared a Receive Maximum, a message that expired while
// in flight keeps its place until the device acknowledges it: the
// device still counts it, and was sent more than it declared.
func TestExpiredInFlightKeepsItsPlaceUnderReceiveMaximum(t *testing.T) {
	f := newFixture(t)
	short := []int64{f.send(t, 1), f.send(t, 1)}
	long := f.send(t, 600)
	c := &recvMaxConn{max: 2}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "the window sent", func() bool { return len(c.received()) == 2 && f.idle() })
	f.clock = f.clock.Add(2*time.Second + ExpiryGrace)
	must(t, f.d.ExpireDue(context.Background())) // both expire; the route reads its queue
	time.Sleep(50 * time.Millisecond)
	eventually(t, "the flush done", f.idle)
	if st, _ := f.state(t, short[0]); st != store.StateExpired {
		t.Fatalf("the short message is %s, want expired", st)
	}
	if got := c.received(); !slices.Equal(got, short) {
		t.Fatalf("received %v with 2 expired unacknowledged, want nothing beyond the Receive Maximum of 2", got)
	}
	f.ackOn(t, c, &c.conn, short[0]) // a late PUBACK frees its place
	eventually(t, "the next message sent", func() bool { return len(c.received()) == 3 })
	if got := c.received(); got[2] != long {
		t.Fatalf("received %v, want %d third", got, long)
	}
}

// TestResubscribeGoesOn checks that a device that unsubscribes and
// subscribes again on the same connection is not sent again what it has
// in flight, which would exceed its Receive Maximum, and gets the rest
// as its PUBACKs come.
func TestResubscribeGoesOn(t *testing.T) {
	f := newFixture(t)
	sent := f.sendN(t, 3)
	c := &recvMaxConn{max: 2}
	f.d.Attach(c, "app", "dev-1")
	eventually(t, "the window sent", func() bool { return len(c.received()) == 2 && f.idle() })
	f.d.Unsubscribe(c, "app", "dev-1")
	f.d.Attach(c, "app", "dev-1")
	time.Sleep(50 * time.Millisecond)
	eventually(t, "the flush done", f.idle)
	if got := c.received(); !slices.Equal(got, sent[:2]) {
		t.Fatalf("received %v after subscribing anew, want still only %v", got, sent[:2])
	}
	f.ackOn(t, c, &c.conn, sent[0])
	eventually(t, "the third sent", func() bool { return len(c.received()) == 3 })
	if got := c.received(); !slices.Equal(got, sent) {
		t.Fatalf("received %v, want %v", got, sent)
	}
}
