package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/store"
)

// GetShadow returns the device's shadow or store.ErrNotFound.
func (s *Store) GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error) {
	if err := s.lock(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.mu.Unlock()
	sh, ok := s.shadows[devKey{appKey, name}]
	if !ok {
		return store.Shadow{}, store.ErrNotFound
	}
	return clone(sh)
}

// SetDesired applies u and records seq under seqNo; see store.Store for
// the errors, which are checked in that order.
func (s *Store) SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error) {
	if err := s.lock(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.mu.Unlock()
	if s.seqUsed(u.AppKey, seqNo, seq) {
		return store.Shadow{}, store.ErrSeqUsed
	}
	k := devKey{u.AppKey, u.DeviceName}
	cur, ok := s.shadows[k]
	if !ok {
		return store.Shadow{}, store.ErrNotFound
	}
	if cur.LastDesiredVersion != u.Version {
		return store.Shadow{}, store.ErrVersionConflict
	}
	sh, err := clone(cur)
	if err != nil {
		return store.Shadow{}, err
	}
	for name, v := range u.Properties {
		p := sh.Properties[name]
		p.DesiredValue, p.DesiredSTime = v, u.Time
		sh.Properties[name] = p
	}
	sh.LastDesiredVersion++
	sh.LastDesiredSTime = u.Time
	if sh, err = clone(sh); err != nil {
		return store.Shadow{}, fmt.Errorf("set desired %s/%s: %w", u.AppKey, u.DeviceName, err)
	}
	s.shadows[k] = sh
	s.putSeq(u.AppKey, seqNo, seq)
	return clone(sh)
}

// ReportProperties applies a device's report; see store.Store.
func (s *Store) ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error) {
	if err := s.lock(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.mu.Unlock()
	k := devKey{r.AppKey, r.DeviceName}
	cur, ok := s.shadows[k]
	if !ok {
		return store.Shadow{}, store.ErrNotFound
	}
	sh, err := clone(cur)
	if err != nil {
		return store.Shadow{}, err
	}
	if _, err := store.ApplyReport(&sh, r); err != nil {
		return store.Shadow{}, err
	}
	if sh, err = clone(sh); err != nil {
		return store.Shadow{}, fmt.Errorf("report %s/%s: %w", r.AppKey, r.DeviceName, err)
	}
	s.shadows[k] = sh
	if r.Emit != nil {
		c, err := clone(sh)
		if err != nil {
			return store.Shadow{}, err
		}
		s.appendLocked(store.Stamp(r.Emit(c), r.AppKey, r.DeviceName))
	}
	return clone(sh)
}

// seq_no entries.

// GetSeq returns the unexpired entry for the app's seq_no, or
// store.ErrNotFound. It is a durable read as store.Store asks: a write is
// visible here only once applied.
func (s *Store) GetSeq(ctx context.Context, appKey string, seqNo int64) (store.SeqEntry, error) {
	if err := s.lock(ctx); err != nil {
		return store.SeqEntry{}, err
	}
	defer s.mu.Unlock()
	e, ok := s.liveSeq(appKey, seqNo)
	if !ok {
		return store.SeqEntry{}, store.ErrNotFound
	}
	e.Body = slices.Clone(e.Body)
	return e, nil
}

// PutSeq records e unless the seq_no holds an unexpired entry
// (store.ErrSeqUsed).
func (s *Store) PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.seqUsed(appKey, seqNo, &e) {
		return store.ErrSeqUsed
	}
	s.putSeq(appKey, seqNo, &e)
	return nil
}

// liveSeq returns the app's entry for seqNo unless it is absent or
// expired. An expired entry counts as absent and is overwritten by the
// next put; none is swept, as a test's store does not live long.
func (s *Store) liveSeq(appKey string, seqNo int64) (store.SeqEntry, bool) {
	e, ok := s.seqs[seqKey{appKey, seqNo}]
	if !ok || e.ExpiresAt <= s.now().UnixMilli() {
		return store.SeqEntry{}, false
	}
	return e, true
}

// seqUsed reports whether seq is set and the seq_no holds a live entry.
func (s *Store) seqUsed(appKey string, seqNo int64, seq *store.SeqEntry) bool {
	if seq == nil {
		return false
	}
	_, ok := s.liveSeq(appKey, seqNo)
	return ok
}

// putSeq records a copy of e, if not nil, under the app's seqNo.
func (s *Store) putSeq(appKey string, seqNo int64, e *store.SeqEntry) {
	if e == nil {
		return
	}
	c := *e
	c.Body = slices.Clone(e.Body)
	s.seqs[seqKey{appKey, seqNo}] = c
}
