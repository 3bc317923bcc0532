package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// lateRead is a store whose first wait returns only once the pull's wait
// is over (a spurious return, which WaitEvents allows), and whose reads
// fail on a done context, like a network store's do.
type lateRead struct {
	*memory.Store
	waits int
}

func (s *lateRead) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	if err := ctx.Err(); err != nil {
		return store.EventPage{}, err
	}
	return s.Store.ReadEvents(ctx, q)
}

func (s *lateRead) WaitEvents(ctx context.Context, app string, after int64) error {
	s.waits++
	if s.waits == 1 {
		<-ctx.Done()
		return nil
	}
	return s.Store.WaitEvents(ctx, app, after)
}

// TestPullWaitEndsDuringARead: the end of a long-poll's wait during a
// read is not a failure; the pull answers with what it has.
func TestPullWaitEndsDuringARead(t *testing.T) {
	svc := events.NewService(&lateRead{Store: memory.New()})
	q := events.Query{EventQuery: store.EventQuery{AppKey: "app-1", Limit: 10}, Wait: 20 * time.Millisecond}
	p, err := svc.Pull(context.Background(), q)
	if err != nil || len(p.Events) != 0 {
		t.Fatalf("pull: %+v %v, want an empty page", p, err)
	}
}
