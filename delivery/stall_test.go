package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// stallConn is a conn whose publishes wait while stall is open, as a
// write to a device that stopped reading waits for the broker's write
// timeout.
type stallConn struct {
	conn
	stall   chan struct{} // closed: publishes go through
	entered chan struct{} // a publish is waiting
}

func (c *stallConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.stall
	return c.conn.Publish(topic, payload, qos)
}

// TestStalledDeviceHoldsNoOneElse: while a flush of dev-1 is blocked
// writing to it, a Notify for dev-1 (a send's, a broadcast step's)
// returns, and the ack stage, holding a delivery of dev-1's, still
// stores dev-2's PUBACK. Both waited for dev-1's write before: one
// device that stopped reading held a broadcast's fan-out, every other
// send to it, and every device's PUBACKs, up to the write timeout.
func TestStalledDeviceHoldsNoOneElse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-2", Secret: "s"}})
	must(t, err)
	c1 := &stallConn{stall: make(chan struct{}), entered: make(chan struct{}, 1)}
	defer close(c1.stall)
	c2 := &conn{}
	f.d.Attach(c1, "app", "dev-1")
	f.d.Attach(c2, "app", "dev-2")

	id1 := f.send(t, 60)
	select {
	case <-c1.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("dev-1's message never published")
	}

	notified := make(chan struct{})
	go func() {
		f.d.Notify(store.Message{ID: id1 + 1, AppKey: "app", DeviceName: "dev-1", Body: "b", State: store.StatePending, ExpireTime: f.clock.Unix() + 60})
		close(notified)
	}()
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("a Notify for dev-1 waits for its blocked write")
	}

	// A delivery of dev-1's in the ack stage, then dev-2's PUBACK.
	f.d.acks.add(ack{r: f.route(), id: id1})
	dev2, err := f.st.GetDevice(ctx, "app", "dev-2")
	must(t, err)
	m2, err := f.svc.Send(ctx, f.app, dev2, message.SendRequest{Body: "b", TTL: 60}, 0, func(int64) *store.SeqEntry { return nil })
	must(t, err)
	eventually(t, "dev-2's message sent", func() bool { return len(c2.received()) == 1 })
	c2.mu.Lock()
	pid := c2.pids[m2.ID]
	c2.mu.Unlock()
	f.d.Acked(c2, "app", "dev-2", pid)
	eventually(t, "dev-2's delivery stored while dev-1's write is blocked", func() bool {
		state, _ := f.state(t, m2.ID)
		return state == store.StateDelivered
	})
}
