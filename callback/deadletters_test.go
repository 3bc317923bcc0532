package callback_test

import (
	"context"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

type deadLetterStore map[string]store.DeadLetter

func (s deadLetterStore) RedeliverDeadLetter(_ context.Context, _, id string) (store.DeadLetter, error) {
	d, ok := s[id]
	if !ok {
		return d, store.ErrNotFound
	}
	delete(s, id)
	return d, nil
}

type told []string

func (t *told) Redelivered(appKey, url string, records int) { *t = append(*t, url) }

func TestRedeliver(t *testing.T) {
	st := deadLetterStore{"7": {ID: "7", URL: "https://example.com/cb", Entries: make([]store.OutboxEntry, 2)}}
	var tell told
	dl := callback.NewDeadLetters(st, &tell)
	d, err := dl.Redeliver(context.Background(), "app", "7")
	if err != nil || d.ID != "7" || len(tell) != 1 || tell[0] != "https://example.com/cb" {
		t.Fatalf("redeliver: %+v %v, told %v", d, err, tell)
	}
	_, err = dl.Redeliver(context.Background(), "app", "7")
	var nf *errdefs.NotFoundError
	if !errors.As(err, &nf) || err.Error() != `dead letter "7" not found` || len(tell) != 1 {
		t.Fatalf("again: %v, told %v", err, tell)
	}
	if _, err := callback.NewDeadLetters(deadLetterStore{}, nil).Redeliver(context.Background(), "app", "1"); !errors.As(err, &nf) {
		t.Fatalf("nobody told: %v", err)
	}
}
