package command_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// gatedBatcher is a memory store that offers store.CommandBatcher, one
// UpdateCommand per update, and records the size of each call. Its
// first call waits for gate before it writes, so that answers pile up
// behind it.
type gatedBatcher struct {
	*memory.Store
	gate chan struct{}

	mu    sync.Mutex
	sizes []int
}

func (b *gatedBatcher) UpdateCommands(ctx context.Context, updates []store.CommandUpdate, visible func()) ([]store.Command, []error, error) {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(updates))
	first := len(b.sizes) == 1
	b.mu.Unlock()
	if first {
		<-b.gate
	}
	out := make([]store.Command, len(updates))
	errs := make([]error, len(updates))
	for i, u := range updates {
		out[i], errs[i] = b.UpdateCommand(ctx, u.AppKey, u.ID, u.Fn)
	}
	if visible != nil {
		visible()
	}
	return out, errs, nil
}

func (b *gatedBatcher) calls() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...)
}

// TestAnswersShareWrites: answers of many devices that come while a
// write applies are stored together in the next one; each is taken or
// dropped as on its own (the first answer of a command wins, even within
// one write), and the calls waiting for the commands wake.
func TestAnswersShareWrites(t *testing.T) {
	const n = 20
	ctx := context.Background()
	mem := memory.New()
	st := &gatedBatcher{Store: mem, gate: make(chan struct{})}
	svc, cmds := pingsOn(t, mem, st, n)

	woke := make(chan []store.Command, 1)
	go func() {
		out, err := svc.Wait(ctx, "app", cmds, time.Minute)
		if err != nil {
			t.Error(err)
		}
		woke <- out
	}()

	type outcome struct {
		dev  int
		took bool
		err  error
	}
	results := make(chan outcome, n+1)
	answer := func(dev int, code int) {
		took, err := svc.Answer(ctx, "app", fmt.Sprintf("d%d", dev+1), command.Reply{ID: cmds[dev].ID, Code: code})
		results <- outcome{dev, took, err}
	}
	go answer(0, 0) // the first write, held at the gate
	for deadline := time.Now().Add(5 * time.Second); len(st.calls()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(st.gate)
			t.Fatal("the answer made no shared write")
		}
	}
	for i := 1; i < n; i++ {
		go answer(i, i%2)
	}
	go answer(1, 7) // a second answer of device 1's command
	time.Sleep(50 * time.Millisecond)
	close(st.gate)

	taken := map[int]int{}
	for range n + 1 {
		o := <-results
		if o.err != nil {
			t.Fatalf("device %d: %v", o.dev, o.err)
		}
		if o.took {
			taken[o.dev]++
		}
	}
	for i := range n {
		if taken[i] != 1 {
			t.Errorf("device %d: %d answers taken, want 1", i, taken[i])
		}
	}
	if got := svc.Dropped(); got != 1 {
		t.Errorf("dropped %d, want 1 (the second answer)", got)
	}
	if calls := st.calls(); len(calls) != 2 || calls[0] != 1 || calls[1] != n {
		t.Errorf("writes of %v answers, want [1 %d]: the answers that came during the first write share the second", calls, n)
	}
	out := <-woke
	for i, c := range out {
		want := store.CmdSucceeded
		if i%2 == 1 {
			want = store.CmdFailed
		}
		if c.State != want {
			t.Errorf("command of device %d woke as %s, want %s", i, c.State, want)
		}
	}
}

// TestAnswersWithoutBatches: a store that turns batches down
// (errors.ErrUnsupported) has every answer written on its own.
func TestAnswersWithoutBatches(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	svc, cmds := pingsOn(t, mem, events.Counted(mem), 3)
	for i, c := range cmds {
		took, err := svc.Answer(ctx, "app", fmt.Sprintf("d%d", i+1), command.Reply{ID: c.ID})
		if !took || err != nil {
			t.Fatalf("answer %d: %v %v", i, took, err)
		}
		got, err := mem.GetCommand(ctx, "app", c.ID)
		must(t, err)
		if got.State != store.CmdSucceeded {
			t.Fatalf("command %d stored as %s", i, got.State)
		}
	}
}
