package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// TestClaimTakenElsewhereIsLost: once another process claims the node_id
// (its fence names that process), the node's next heartbeat reports the
// loss, and its fenced store refuses work without reaching Redis.
func TestClaimTakenElsewhereIsLost(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	a := join(t, st, 1)
	defer a.Close()
	a.Run(&handler{})
	fst := a.Fence(st)
	if err := fst.CreateApp(ctx, store.App{Key: "before", Name: "b"}); err != nil {
		t.Fatalf("a node holding its claim: %v", err)
	}
	if err := st.Client().Set(ctx, a.FenceKey(), "another process", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the node did not notice another process claimed its node_id")
	}
	if a.Valid() {
		t.Fatal("a node that lost its node_id still holds a valid lease")
	}
	if err := fst.CreateApp(ctx, store.App{Key: "after", Name: "a"}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a write of a node that lost its node_id: %v, want ErrFenced", err)
	}
	if _, err := st.GetApp(ctx, "after"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the write landed: %v", err)
	}
	if _, err := fst.AppendEvents(ctx, []store.Event{{AppKey: "before", Type: "device.up"}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("an event append of a node that lost its node_id: %v, want ErrFenced", err)
	}
	if _, err := fst.TrimEvents(ctx, "before", 1, 0); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("an event trim of a node that lost its node_id: %v, want ErrFenced", err)
	}
}
