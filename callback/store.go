package callback

import (
	"context"

	"github.com/devmsg/devmsg/store"
)

// Store is what the Worker needs of the store: the outbox it routes, the
// delivery queues it sends from, and the dead-letter list; store.Store is
// one. See store.Store for what each method promises.
type Store interface {
	ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error)
	RouteOutbox(ctx context.Context, routes []store.OutboxRoute) error
	CallbackQueues(ctx context.Context) ([]store.CallbackQueue, error)
	ReadCallbacks(ctx context.Context, q store.CallbackQueue, after int64, limit int) ([]store.OutboxEntry, error)
	DeleteCallbacks(ctx context.Context, q store.CallbackQueue, seqs []int64) error
	MoveCallbacks(ctx context.Context, from store.CallbackQueue, entries []store.OutboxEntry, toURL string) error
	PutDeadLetter(ctx context.Context, d store.DeadLetter) error
	// Barrier returns once every write a read before it saw is durable:
	// no record goes out that a crash could take back.
	Barrier(ctx context.Context) error
}

var _ Store = store.Store(nil)
