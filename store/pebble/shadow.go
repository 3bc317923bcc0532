package pebble

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Shadows.

// GetShadow returns the device's shadow or store.ErrNotFound.
func (s *Store) GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error) {
	if err := s.enter(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.exit()
	return s.getShadow(appKey, name)
}

func (s *Store) getShadow(appKey, name string) (store.Shadow, error) {
	var sh store.Shadow
	if err := s.getJSON(key(pShadow, appKey, name), &sh); err != nil {
		return store.Shadow{}, err
	}
	if sh.Properties == nil {
		sh.Properties = map[string]store.Property{}
	}
	return sh, nil
}

// SetDesired applies u and records seq under seqNo in one synced batch;
// see store.Store for the errors, which are checked in that order.
func (s *Store) SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error) {
	if err := s.enterWrite(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.exit()
	defer s.lockDeviceAndSeq(u.AppKey, u.DeviceName, seqNo, seq != nil)()
	if err := s.checkSeqFree(u.AppKey, seqNo, seq); err != nil {
		return store.Shadow{}, err
	}
	sh, err := s.getShadow(u.AppKey, u.DeviceName)
	if err != nil {
		return store.Shadow{}, err
	}
	if sh.LastDesiredVersion != u.Version {
		return store.Shadow{}, store.ErrVersionConflict
	}
	for name, v := range u.Properties {
		p := sh.Properties[name]
		p.DesiredValue, p.DesiredSTime = v, u.Time
		sh.Properties[name] = p
	}
	sh.LastDesiredVersion++
	sh.LastDesiredSTime = u.Time
	err = s.write(func(b *pebble.Batch) error {
		if err := setJSON(b, key(pShadow, u.AppKey, u.DeviceName), sh); err != nil {
			return err
		}
		return putSeq(b, u.AppKey, seqNo, seq)
	})
	if err != nil {
		return store.Shadow{}, fmt.Errorf("set desired %s/%s: %w", u.AppKey, u.DeviceName, err)
	}
	return sh, nil
}

// seq_no entries.

// GetSeq returns the unexpired entry for the app's seq_no, or
// store.ErrNotFound. It takes the seq_no's stripe, so it never returns an
// entry whose write is still waiting for its fsync: a retry must not
// replay a response that a crash could still undo. It is a durable read
// (store.Store): after the read it also waits for every write the read
// could see to be durable, as its callers once did with Barrier.
func (s *Store) GetSeq(ctx context.Context, appKey string, seqNo int64) (store.SeqEntry, error) {
	if err := s.enter(ctx); err != nil {
		return store.SeqEntry{}, err
	}
	defer s.exit()
	i := seqStripe(appKey, seqNo)
	s.locks[i].Lock()
	e, err := s.getSeq(appKey, seqNo)
	s.locks[i].Unlock()
	if err != nil {
		return store.SeqEntry{}, err
	}
	// A durable read: the entry's write may be visible before it is
	// durable.
	if err := s.barrier(); err != nil {
		return store.SeqEntry{}, fmt.Errorf("get seq_no %d of %s: %w", seqNo, appKey, err)
	}
	return e, nil
}

func (s *Store) getSeq(appKey string, seqNo int64) (store.SeqEntry, error) {
	var e store.SeqEntry
	if err := s.getJSON(seqKey(appKey, seqNo), &e); err != nil {
		return store.SeqEntry{}, err
	}
	if e.ExpiresAt <= s.now().UnixMilli() {
		return store.SeqEntry{}, store.ErrNotFound
	}
	return e, nil
}

// checkSeqFree returns store.ErrSeqUsed if seq is set and the seq_no holds
// an unexpired entry. The caller holds the seq_no's stripe.
func (s *Store) checkSeqFree(appKey string, seqNo int64, seq *store.SeqEntry) error {
	if seq == nil {
		return nil
	}
	_, err := s.getSeq(appKey, seqNo)
	switch {
	case err == nil:
		return store.ErrSeqUsed
	case errors.Is(err, store.ErrNotFound):
		return nil
	default:
		return fmt.Errorf("check seq_no %d of %s: %w", seqNo, appKey, err)
	}
}

// PutSeq records e unless the seq_no holds an unexpired entry
// (store.ErrSeqUsed).
func (s *Store) PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	i := seqStripe(appKey, seqNo)
	s.locks[i].Lock()
	defer s.locks[i].Unlock()
	if err := s.checkSeqFree(appKey, seqNo, &e); err != nil {
		return err
	}
	if err := s.write(func(b *pebble.Batch) error { return putSeq(b, appKey, seqNo, &e) }); err != nil {
		return fmt.Errorf("put seq_no %d of %s: %w", seqNo, appKey, err)
	}
	return nil
}

// putSeq adds e (if not nil) and its expiry index key to b.
func putSeq(b *pebble.Batch, appKey string, seqNo int64, e *store.SeqEntry) error {
	if e == nil {
		return nil
	}
	if err := setJSON(b, seqKey(appKey, seqNo), e); err != nil {
		return err
	}
	return set(b, seqExpKey(e.ExpiresAt, appKey, seqNo), nil)
}

// ReportProperties applies a device's report under the device's lock.
func (s *Store) ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error) {
	if err := s.enterWrite(ctx); err != nil {
		return store.Shadow{}, err
	}
	defer s.exit()
	defer s.lock2(deviceStripe(r.AppKey, r.DeviceName), deviceStripe(r.AppKey, r.DeviceName))()
	sh, err := s.getShadow(r.AppKey, r.DeviceName)
	if err != nil {
		return store.Shadow{}, err
	}
	if _, err := store.ApplyReport(&sh, r); err != nil {
		return store.Shadow{}, err
	}
	err = s.writeEvents(func(b *pebble.Batch) ([]store.Event, error) {
		if err := setJSON(b, key(pShadow, r.AppKey, r.DeviceName), sh); err != nil {
			return nil, err
		}
		if r.Emit == nil {
			return nil, nil
		}
		return store.Stamp(r.Emit(sh), r.AppKey, r.DeviceName), nil
	})
	if err != nil {
		return store.Shadow{}, fmt.Errorf("report %s/%s: %w", r.AppKey, r.DeviceName, err)
	}
	return sh, nil
}
