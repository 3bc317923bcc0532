package events

import (
	"context"

	"github.com/devmsg/devmsg/store"
)

// The fan-out and batch sends look for two optional methods that are no
// part of the store.Store contract (see store.BroadcastStep): a
// CountedStore passes them on, so that wrapping a store that has them
// (Pebble) keeps its shortcuts, and answers as a store without them
// (Redis) does when the wrapped one has none.

// FlagEpoch is the wrapped store's FlagEpoch; ok false when it has none.
func (s *CountedStore) FlagEpoch() (epoch uint64, ok bool) {
	if fe, ok := s.Store.(interface{ FlagEpoch() (uint64, bool) }); ok {
		return fe.FlagEpoch()
	}
	return 0, false
}

// PrepareStep is the wrapped store's PrepareStep; nil when it has none.
func (s *CountedStore) PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error) {
	if ps, ok := s.Store.(interface {
		PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
	}); ok {
		return ps.PrepareStep(ctx, appKey, msgs, connected)
	}
	return nil, nil
}

var (
	_ interface{ FlagEpoch() (uint64, bool) } = (*CountedStore)(nil)
	_ interface {
		PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
	} = (*CountedStore)(nil)
)
