package message

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// The domain's tests run the Service on a Pebble store, with a stand-in
// for delivery.Dispatcher: delivery imports message, so these tests
// cannot use the real one, and what they check needs of delivery only
// whether a device is online and the sweep that fails a disabled
// device's pending messages.

// conn is a device's connection, to attach to the stand-in dispatcher.
type conn struct{}

// dispatcher stands in for delivery.Dispatcher: a device is online once
// a connection of it attached, Notify's word is dropped (nothing is
// sent), and FailPending fails a device's pending messages as
// delivery.Dispatcher.FailPending does.
type dispatcher struct {
	st     *pebble.Store
	now    func() time.Time
	mu     sync.Mutex
	online map[[2]string]bool
}

var _ Router = (*dispatcher)(nil)

// Local is delivery.Local for the stand-in, which is a Router itself.
func Local(d *dispatcher) Router { return d }

// Attach has the device online.
func (d *dispatcher) Attach(_ *conn, app, dev string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.online == nil {
		d.online = map[[2]string]bool{}
	}
	d.online[[2]string{app, dev}] = true
}

func (d *dispatcher) Online(dev store.Device) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.online[[2]string{dev.AppKey, dev.Name}]
}

func (d *dispatcher) Notify(store.Message, store.Device) {}

// FailPending is what delivery.Dispatcher.FailPending does.
func (d *dispatcher) FailPending(ctx context.Context, app, dev string, code int, reason string) error {
	return FailPending(ctx, d.st, app, dev, code, reason, d.now())
}

type fixture struct {
	st    *pebble.Store
	d     *dispatcher
	svc   *Service
	app   store.App
	clock time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	f := &fixture{st: st, app: store.App{Key: "app", Name: "a"}, clock: time.Now()}
	if err := st.CreateApp(ctx, f.app); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	ids, _ := idgen.New(0)
	f.d = &dispatcher{st: st}
	f.d.now = func() time.Time { return f.clock }
	f.svc = NewService(st, ids, Local(f.d))
	f.svc.now = f.d.now
	return f
}

func (f *fixture) send(t *testing.T, ttl int64) int64 {
	t.Helper()
	dev, err := f.st.GetDevice(context.Background(), "app", "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.svc.Send(context.Background(), f.app, dev, SendRequest{Body: "b", TTL: ttl}, 0, func(int64) *store.SeqEntry { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
