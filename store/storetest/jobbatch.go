package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

// testJobExecutionFollowsBatch checks, on a store that offers
// store.CommandBatcher, that UpdateCommands moves the executions of job
// commands and the job's counts as UpdateCommand does: sent (lazy) and
// delivered states of two commands of a job in one call.
func testJobExecutionFollowsBatch(t *testing.T, s store.Store) {
	b, ok := s.(store.CommandBatcher)
	if !ok {
		t.Skip("the store writes command updates one by one")
	}
	ctx := context.Background()
	j, targets := startFixture(t, s)
	_, err := s.StartJob(ctx, "a", 1, 0, 2, firstStarts(j, targets, 0, 2, 1))
	must(t, err)
	pending := int64(len(targets) - 2)
	sent := func(c *store.Command) error { c.State, c.TimeSent, c.Lazy = store.CmdSent, 5, true; return nil }
	delivered := func(c *store.Command) error {
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, 10, time.Now().Add(time.Minute).UnixMilli()
		return nil
	}
	_, errs, err := b.UpdateCommands(ctx, []store.CommandUpdate{
		{AppKey: "a", ID: 1, Fn: sent}, {AppKey: "a", ID: 2, Fn: sent}, {AppKey: "a", ID: 2, Fn: delivered},
	}, nil)
	must(t, err)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	wantCounts(t, s, "a", 1, map[string]int64{store.CmdSent: 1, store.CmdDelivered: 1, store.ExecPending: pending})
	if e := execution(t, s, 1, 0); e.State != store.CmdSent || e.CmdID != 1 {
		t.Fatalf("execution 0: %+v", e)
	}
	if e := execution(t, s, 1, 1); e.State != store.CmdDelivered || e.CmdID != 2 {
		t.Fatalf("execution 1: %+v", e)
	}
}
