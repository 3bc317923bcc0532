package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// batcher is a memory store that offers store.CommandBatcher, one
// UpdateCommand per update (enough to see what CountedStore counts).
type batcher struct{ *memory.Store }

func (b batcher) UpdateCommands(ctx context.Context, updates []store.CommandUpdate, visible func()) ([]store.Command, []error, error) {
	if visible != nil {
		defer visible()
	}
	out := make([]store.Command, len(updates))
	errs := make([]error, len(updates))
	for i, u := range updates {
		out[i], errs[i] = b.UpdateCommand(ctx, u.AppKey, u.ID, u.Fn)
	}
	return out, errs, nil
}

// TestCountedUpdateCommands checks that CountedStore passes UpdateCommands
// on to a store that offers it, counting the events of the updates
// stored only, and refuses it (errors.ErrUnsupported) for one that does
// not.
func TestCountedUpdateCommands(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	_, err := mem.CreateDevices(ctx, "app", []store.Device{{AppKey: "app", Name: "d1"}})
	if err != nil {
		t.Fatal(err)
	}
	var cmds []store.Command
	for id := int64(1); id <= 2; id++ {
		cmds = append(cmds, store.Command{ID: id, DeviceName: "d1", Name: "x", TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: 1})
	}
	if _, err := mem.CreateCommands(ctx, "app", cmds, 0, nil); err != nil {
		t.Fatal(err)
	}
	end := func(c *store.Command) error {
		c.State, c.TimeDone = store.CmdSucceeded, 2
		c.Emit = []store.Event{events.New(events.TypeCommandDone, "app", "d1", time.Now(), nil)}
		return nil
	}
	refuse := func(c *store.Command) error {
		c.Emit = []store.Event{events.New(events.TypeCommandDone, "app", "d1", time.Now(), nil)}
		return errors.New("refused")
	}
	updates := []store.CommandUpdate{{AppKey: "app", ID: 1, Fn: end}, {AppKey: "app", ID: 2, Fn: refuse}}

	if _, _, err := events.Counted(mem).UpdateCommands(ctx, updates, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("over a store without it: %v, want ErrUnsupported", err)
	}
	st := events.Counted(batcher{mem})
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	_, errs, err := st.UpdateCommands(ctx, updates, nil)
	if err != nil || errs[0] != nil || errs[1] == nil {
		t.Fatalf("UpdateCommands: %v %v", errs, err)
	}
	if got := appended(t, reg)[events.TypeCommandDone]; got != 1 {
		t.Fatalf("%v command.done counted, want 1", got)
	}
}
