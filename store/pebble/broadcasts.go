package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Broadcast keys.
const (
	// g/<app>\0<id> → Broadcast.
	pBroadcast = "g/"
	// h/<id><app> → empty: the active broadcasts, oldest first, so a
	// restart finds them without reading every app.
	pActiveBroadcast = "h/"
	// i/<app>\0<id><chunk> → the names of one chunk of a broadcast's
	// targets joined by \0 (names hold none); chunk is 4 bytes.
	pTargets = "i/"
)

func targetsKey(app string, id int64, n int) []byte {
	return binary.BigEndian.AppendUint32(broadcastKeyIn(pTargets, app, id), uint32(n))
}

func broadcastKeyIn(prefix, app string, id int64) []byte {
	return binary.BigEndian.AppendUint64(key(prefix, app, ""), uint64(id))
}

func broadcastKey(app string, id int64) []byte { return broadcastKeyIn(pBroadcast, app, id) }

func activeBroadcastKey(app string, id int64) []byte {
	return append(binary.BigEndian.AppendUint64([]byte(pActiveBroadcast), uint64(id)), app...)
}

// steppedBroadcast is a broadcast as the last step written under bcMu
// left it, so that the next step need not read and decode it again (a
// thirtieth of a fan-out's serial write). Broadcasts are written only
// under bcMu, by CreateMessages' steps, CreateBroadcast and
// UpdateBroadcast; the last two forget it.
type steppedBroadcast struct {
	ok  bool
	app string
	b   store.Broadcast
}

// get returns the app's broadcast id, from s's database unless it is
// the one held; the caller holds bcMu.
func (c *steppedBroadcast) get(s *Store, appKey string, id int64) (store.Broadcast, error) {
	if c.ok && c.app == appKey && c.b.ID == id {
		return c.b, nil
	}
	var b store.Broadcast
	err := s.getJSON(broadcastKey(appKey, id), &b)
	return b, err
}

// set holds b, the app's broadcast as just written; the caller holds
// bcMu.
func (c *steppedBroadcast) set(appKey string, b store.Broadcast) {
	*c = steppedBroadcast{ok: true, app: appKey, b: b}
}

// forget drops what c holds; the caller holds bcMu.
func (c *steppedBroadcast) forget() { *c = steppedBroadcast{} }

// putBroadcast adds b and its place in the active index to batch.
func (s *Store) putBroadcast(batch *pebble.Batch, b store.Broadcast) error {
	if err := setJSON(batch, broadcastKey(b.AppKey, b.ID), b); err != nil {
		return err
	}
	if b.Active() {
		return set(batch, activeBroadcastKey(b.AppKey, b.ID), nil)
	}
	return batch.Delete(activeBroadcastKey(b.AppKey, b.ID), nil)
}

// CreateBroadcast stores b, its targets and seq in one synced batch.
func (s *Store) CreateBroadcast(ctx context.Context, b store.Broadcast, targets [][]string, seqNo int64, seq *store.SeqEntry) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.bcMu.Lock()
	defer s.bcMu.Unlock()
	s.stepped.forget()
	if seq != nil {
		defer s.lock2(seqStripe(b.AppKey, seqNo), seqStripe(b.AppKey, seqNo))()
		if err := s.checkSeqFree(b.AppKey, seqNo, seq); err != nil {
			return err
		}
	}
	if found, err := s.exists(broadcastKey(b.AppKey, b.ID)); err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	} else if found {
		return store.ErrAlreadyExists
	}
	err := s.write(func(batch *pebble.Batch) error {
		if err := s.putBroadcast(batch, b); err != nil {
			return err
		}
		for n, names := range targets {
			if err := set(batch, targetsKey(b.AppKey, b.ID, n), joinNames(names)); err != nil {
				return err
			}
		}
		return putSeq(batch, b.AppKey, seqNo, seq)
	})
	if err != nil {
		return fmt.Errorf("create broadcast %d: %w", b.ID, err)
	}
	return nil
}

// joinNames joins device names with \0, which none holds.
func joinNames(names []string) []byte {
	n := len(names)
	for _, name := range names {
		n += len(name)
	}
	b := make([]byte, 0, n)
	for i, name := range names {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, name...)
	}
	return b
}

// splitNames is the inverse of joinNames.
func splitNames(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(string(b), "\x00")
}

// BroadcastTargets returns chunk n of the broadcast's targets.
func (s *Store) BroadcastTargets(ctx context.Context, appKey string, id int64, n int) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	v, closer, err := s.db.Get(targetsKey(appKey, id, n))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("targets of broadcast %d: %w", id, err)
	}
	defer closer.Close()
	return splitNames(v), nil
}

// GetBroadcast returns the app's broadcast or store.ErrNotFound.
func (s *Store) GetBroadcast(ctx context.Context, appKey string, id int64) (store.Broadcast, error) {
	if err := s.enter(ctx); err != nil {
		return store.Broadcast{}, err
	}
	defer s.exit()
	var b store.Broadcast
	return b, s.getJSON(broadcastKey(appKey, id), &b)
}

// UpdateBroadcast applies fn to the broadcast under bcMu and stores it.
func (s *Store) UpdateBroadcast(ctx context.Context, appKey string, id int64, fn func(*store.Broadcast) error) (store.Broadcast, error) {
	if err := s.enter(ctx); err != nil {
		return store.Broadcast{}, err
	}
	defer s.exit()
	s.bcMu.Lock()
	defer s.bcMu.Unlock()
	s.stepped.forget()
	var b store.Broadcast
	if err := s.getJSON(broadcastKey(appKey, id), &b); err != nil {
		return store.Broadcast{}, err
	}
	chunk, chunks := b.Chunk, b.Chunks
	if err := fn(&b); err != nil {
		return store.Broadcast{}, err
	}
	b.ID, b.AppKey, b.Chunk, b.Chunks = id, appKey, chunk, chunks
	err := s.write(func(batch *pebble.Batch) error {
		if b.State != store.BroadcastFanningOut && b.Chunk < b.Chunks {
			if err := batch.DeleteRange(targetsKey(appKey, id, b.Chunk), targetsKey(appKey, id, b.Chunks), nil); err != nil {
				return err
			}
		}
		return s.putBroadcast(batch, b)
	})
	if err != nil {
		return store.Broadcast{}, fmt.Errorf("update broadcast %d: %w", id, err)
	}
	return b, nil
}

// ActiveBroadcasts reads the active index and the broadcasts it names.
func (s *Store) ActiveBroadcasts(ctx context.Context) ([]store.Broadcast, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var keys [][]byte
	prefix := []byte(pActiveBroadcast)
	err := s.scan(prefix, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
		if len(k) < len(prefix)+8 {
			return true, nil
		}
		id := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		keys = append(keys, broadcastKey(string(k[len(prefix)+8:]), id))
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("active broadcasts: %w", err)
	}
	out := make([]store.Broadcast, 0, len(keys))
	for _, k := range keys {
		var b store.Broadcast
		if err := s.getJSON(k, &b); err != nil {
			return nil, fmt.Errorf("active broadcasts: %w", err)
		}
		if b.Active() {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b store.Broadcast) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
