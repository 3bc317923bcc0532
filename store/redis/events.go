package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/devmsg/devmsg/store"
)

// errNoEventLog: the event log of this backend is being written (issue
// 14); until then every call that would touch it fails, rather than drop
// events silently.
var errNoEventLog = fmt.Errorf("event log: %w on this backend yet", errors.ErrUnsupported)

// AppendEvents is not implemented yet.
func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	return nil, errNoEventLog
}

// ReadEvents is not implemented yet.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	return store.EventPage{}, errNoEventLog
}

// WaitEvents is not implemented yet.
func (s *Store) WaitEvents(ctx context.Context, appKey string, after int64) error {
	return errNoEventLog
}

// TrimEvents is not implemented yet.
func (s *Store) TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error) {
	return 0, errNoEventLog
}
