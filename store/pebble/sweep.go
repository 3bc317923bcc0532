package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// sweep deletes expired seq_no entries every sweepEvery until Close.
func (s *Store) sweep() {
	defer close(s.done)
	if s.sweepEvery <= 0 {
		<-s.stop
		return
	}
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if _, err := s.sweepOnce(); err != nil {
				s.log.Error("sweep expired seq_no entries", "err", err)
			}
		}
	}
}

// sweepOnce deletes the entries that have expired by now and their index
// keys, and returns how many index keys it removed.
func (s *Store) sweepOnce() (int, error) {
	now := s.now().UnixMilli()
	lower := []byte(pSeqExp)
	upper := binary.BigEndian.AppendUint64([]byte(pSeqExp), uint64(now)+1) // expiry <= now
	total := 0
	for {
		var keys [][]byte
		err := s.scan(lower, upper, func(k, _ []byte) (bool, error) {
			keys = append(keys, bytes.Clone(k))
			return len(keys) < sweepChunk, nil
		})
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		if err := s.sweepKeys(keys, now); err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += len(keys)
		if len(keys) < sweepChunk {
			return total, nil
		}
		// Start after the last key rather than rescanning the tombstones.
		lower = append(keys[len(keys)-1], 0)
	}
}

// sweepKeys deletes the index keys and, where the entry they point to has
// expired, the entry. It holds the entries' stripes until the batch is
// committed: otherwise a PutSeq could replace an expired entry between the
// check and the commit, and the sweeper would delete the fresh one.
func (s *Store) sweepKeys(keys [][]byte, now int64) error {
	held := make([]int, 0, len(keys))
	for _, k := range keys {
		if app, seq, ok := parseSeqExpKey(k); ok {
			held = append(held, seqStripe(app, seq))
		}
	}
	slices.Sort(held)
	held = slices.Compact(held)
	for _, i := range held {
		s.locks[i].Lock()
	}
	defer func() {
		for _, i := range held {
			s.locks[i].Unlock()
		}
	}()
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range keys {
		if err := b.Delete(k, nil); err != nil {
			return fmt.Errorf("delete %q: %w", k, err)
		}
		app, seq, ok := parseSeqExpKey(k)
		if !ok {
			continue
		}
		var e store.SeqEntry
		err := s.getJSON(seqKey(app, seq), &e)
		if errors.Is(err, store.ErrNotFound) || err == nil && e.ExpiresAt > now {
			continue // already gone, or replaced by a live entry
		}
		if err != nil {
			return err
		}
		if err := b.Delete(seqKey(app, seq), nil); err != nil {
			return fmt.Errorf("delete seq_no %d of %s: %w", seq, app, err)
		}
	}
	// Unsynced: a sweep lost in a crash leaves entries that already count
	// as absent, and the next sweep deletes them.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
