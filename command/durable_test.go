package command_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// barrierStore counts Barrier calls.
type barrierStore struct {
	*memory.Store
	barriers atomic.Int64
}

func (s *barrierStore) Barrier(ctx context.Context) error {
	s.barriers.Add(1)
	return s.Store.Barrier(ctx)
}

// TestReadStatesMadeDurable: a store may show a write before its fsync,
// so what the service passes on from a read rather than its own write
// (a repeated answer it acknowledges, the cancel of an ended command, a
// Get) waits for a Barrier first.
func TestReadStatesMadeDurable(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	st := &barrierStore{Store: mem}
	svc, c := pingOn(t, mem, st)
	id := c.ID
	reply := command.Reply{ID: id, Result: []byte(`"pong"`)}
	if took, err := svc.Answer(ctx, "app", "d1", reply); !took || err != nil {
		t.Fatalf("answer: %v %v", took, err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"a repeated answer", func() error {
			took, err := svc.Answer(ctx, "app", "d1", reply)
			if took {
				t.Error("the repeated answer was taken")
			}
			return err
		}},
		{"the cancel of an ended command", func() error {
			c, err := svc.Cancel(ctx, "app", id)
			if c.State != store.CmdSucceeded {
				t.Errorf("cancel shows %s", c.State)
			}
			return err
		}},
		{"a get", func() error {
			_, err := svc.Get(ctx, "app", id)
			return err
		}},
	}
	for _, s := range steps {
		before := st.barriers.Load()
		must(t, s.do())
		if st.barriers.Load() == before {
			t.Errorf("%s: no barrier", s.name)
		}
	}
}
