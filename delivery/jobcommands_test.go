package delivery

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// cmdConn records the command publishes a device gets.
type cmdConn struct {
	mu   sync.Mutex
	pid  uint16
	cmds []string
}

func (c *cmdConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pid++
	c.cmds = append(c.cmds, topic+" "+string(payload))
	return c.pid, nil
}

func (c *cmdConn) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.cmds...)
}

// offlineRouter keeps every command queued, as for devices not
// connected when their job reaches them.
type offlineRouter struct{}

func (offlineRouter) CommandOnline(store.Device) bool           { return false }
func (offlineRouter) NotifyCommand(store.Command, store.Device) {}
func (offlineRouter) CancelCommand(store.Command)               {}

// registry creates apps and devices: the memory store or Pebble.
type registry interface {
	CreateApp(ctx context.Context, a store.App) error
	CreateDevices(ctx context.Context, appKey string, devs []store.Device) ([]error, error)
}

// offlineCommands creates app "app" with devices in mem and returns a
// command service on st (mem, or a store wrapping it) that holds every
// command queued, as for devices not connected.
func offlineCommands(t *testing.T, mem registry, st command.Store, devices ...string) *command.Service {
	t.Helper()
	ctx := context.Background()
	if err := mem.CreateApp(ctx, store.App{Key: "app"}); err != nil {
		t.Fatal(err)
	}
	devs := make([]store.Device, len(devices))
	for i, name := range devices {
		devs[i] = store.Device{AppKey: "app", Name: name}
	}
	if _, err := mem.CreateDevices(ctx, "app", devs); err != nil {
		t.Fatal(err)
	}
	ids, err := idgen.New(0)
	if err != nil {
		t.Fatal(err)
	}
	svc := command.NewService(st, ids, slog.New(slog.DiscardHandler))
	svc.SetRouter(offlineRouter{})
	return svc
}

// A job cancelled or aborted cancels its queued commands in the
// background, after its cancel answered: a device that connects before
// the sweep reaches its command must not get it, while the command of a
// job still running is sent as ever.
func TestQueuedCommandOfAnEndedJobIsNotSent(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	svc := offlineCommands(t, st, st, "dev-1", "dev-2")
	log := slog.New(slog.DiscardHandler)
	start := func(device string, id int64) store.Job {
		j := store.Job{ID: id, AppKey: "app", State: store.JobRunning, Targets: 1,
			Command: store.JobCommand{Name: "ota", Timeout: 30}, TTL: 600, Rate: 1000, TimeCreate: time.Now().UnixMilli()}
		if err := st.CreateJob(ctx, j, []string{device}, id, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.StartJob(ctx, j, 1, []command.JobTarget{{DeviceName: device, Attempt: 1}}); err != nil {
			t.Fatal(err)
		}
		return j
	}
	cancelled := start("dev-1", 1001)
	start("dev-2", 1002)
	if _, err := st.UpdateJob(ctx, "app", cancelled.ID, func(j *store.Job) error {
		j.State, j.TimeDone = store.JobCancelled, time.Now().UnixMilli()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cs := NewCommandSender(st, svc, log)
	c1, c2 := &cmdConn{}, &cmdConn{}
	cs.Attach(ctx, c1, "app", "dev-1", false)
	cs.Attach(ctx, c2, "app", "dev-2", false)
	if got := c1.got(); len(got) != 0 {
		t.Fatalf("dev-1 got the queued command of a cancelled job: %q", got)
	}
	if got := c2.got(); len(got) != 1 {
		t.Fatalf("dev-2 got %q: want the command of its running job", got)
	}
}
