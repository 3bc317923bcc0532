package message

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// deviceReadCounter counts the device reads made after armed is set.
type deviceReadCounter struct {
	*pebble.Store
	armed atomic.Bool
	reads atomic.Int64
}

func (s *deviceReadCounter) GetDevice(ctx context.Context, appKey, name string) (store.Device, error) {
	if s.armed.Load() {
		s.reads.Add(1)
	}
	return s.Store.GetDevice(ctx, appKey, name)
}

// TestBatchCommitFlags: a batch send's Commit reads its devices again
// (to fail the messages of one disabled or deleted meanwhile) only when
// the store's FlagEpoch moved since Plan read them; a device disabled
// between Plan and Commit still gets its message failed with 3003.
func TestBatchCommitFlags(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.st.CreateDevices(ctx, "app", []store.Device{{Name: "dev-2", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	st := &deviceReadCounter{Store: f.st}
	ids, _ := idgen.New(0)
	svc := NewService(st, ids, Local(f.d))
	svc.now = f.d.now
	send := BatchSend{Devices: []string{"dev-1", "dev-2"}, SendRequest: SendRequest{Body: "b", TTL: 60}}

	p, err := svc.Plan(ctx, f.app, send)
	if err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	if _, err := svc.Commit(ctx, p, 0, nil); err != nil {
		t.Fatal(err)
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("Commit read %d devices again with no flag changed since Plan; want none", n)
	}

	st.armed.Store(false)
	p, err = svc.Plan(ctx, f.app, send)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.UpdateDevice(ctx, "app", "dev-2", func(d *store.Device) error {
		d.Flag = store.FlagDisabled
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	if _, err := svc.Commit(ctx, p, 0, nil); err != nil {
		t.Fatal(err)
	}
	if n := st.reads.Load(); n == 0 {
		t.Error("Commit did not read the devices again after a flag changed")
	}
	for j, bm := range p.msgs {
		m, err := f.st.GetMessage(ctx, "app", bm.Message.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := store.StatePending
		if p.devs[j].Name == "dev-2" {
			want = store.StateFailed
		}
		if m.State != want {
			t.Errorf("%s's message %s, want %s", m.DeviceName, m.State, want)
		}
	}
}
