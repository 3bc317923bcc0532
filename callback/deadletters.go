package callback

import (
	"context"
	"errors"
	"fmt"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// DeadLetterStore is what DeadLetters needs of the store.
type DeadLetterStore interface {
	RedeliverDeadLetter(ctx context.Context, appKey, id string) (store.DeadLetter, error)
}

// Redeliverer is told of a dead letter put back on its queue, so that
// delivery resumes at once (*Worker is one).
type Redeliverer interface {
	Redelivered(appKey, url string, records int)
}

// DeadLetters puts the batches that exhausted their retries back for
// delivery.
type DeadLetters struct {
	store DeadLetterStore
	tell  Redeliverer
}

// NewDeadLetters returns DeadLetters on st telling tell (nil: nobody) of
// each redelivery.
func NewDeadLetters(st DeadLetterStore, tell Redeliverer) *DeadLetters {
	return &DeadLetters{store: st, tell: tell}
}

// Redeliver puts the app's dead letter id back at the end of its URL's
// delivery queue and returns it; a *errdefs.NotFoundError if the app has
// no such dead letter.
func (d *DeadLetters) Redeliver(ctx context.Context, appKey, id string) (store.DeadLetter, error) {
	dl, err := d.store.RedeliverDeadLetter(ctx, appKey, id)
	if errors.Is(err, store.ErrNotFound) {
		return dl, errdefs.NotFound("dead letter", id)
	}
	if err != nil {
		return dl, fmt.Errorf("redeliver dead letter: %w", err)
	}
	if d.tell != nil {
		d.tell.Redelivered(appKey, dl.URL, len(dl.Entries))
	}
	return dl, nil
}
