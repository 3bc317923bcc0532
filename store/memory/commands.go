package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/devmsg/devmsg/store"
)

// CreateCommands stores cmds with seq in one step; see store.Commands.
func (s *Store) CreateCommands(ctx context.Context, appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq) ([]store.Command, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if seq != nil {
		if _, ok := s.liveSeq(appKey, seqNo); ok {
			return nil, store.ErrSeqUsed
		}
	}
	out, err := s.createCommandsLocked(appKey, cmds)
	if err != nil {
		return nil, err
	}
	if seq != nil {
		s.putSeq(appKey, seqNo, seq(out))
	}
	return out, nil
}

// createCommandsLocked admits and stores cmds, with their events and,
// for a job's commands, their executions. Call with s.mu held.
func (s *Store) createCommandsLocked(appKey string, cmds []store.Command) ([]store.Command, error) {
	out := slices.Clone(cmds)
	opened := map[devKey]int{}
	for i := range out {
		c := &out[i]
		c.AppKey = appKey
		k := devKey{appKey, c.DeviceName}
		_, exists := s.devices[k]
		if store.AdmitCommand(c, exists, len(s.cmdOpen[k])+opened[k]) {
			opened[k]++
		}
	}
	stored := make([]store.Command, len(out))
	for i := range out {
		c, err := clone(out[i])
		if err != nil {
			return nil, fmt.Errorf("create command %d: %w", out[i].ID, err)
		}
		c.Emit = nil
		stored[i] = c
	}
	var evs []store.Event
	for i := range out {
		c := stored[i]
		evs = append(evs, store.Stamp(out[i].Emit, appKey, c.DeviceName)...)
		out[i].Emit = nil
		s.cmds[c.ID] = c
		if c.Open() {
			k := devKey{appKey, c.DeviceName}
			s.cmdOpen[k] = insertSorted(s.cmdOpen[k], c.ID)
		}
		s.lastCmdID = max(s.lastCmdID, c.ID)
		s.noteJobCommand(c)
	}
	s.appendLocked(evs)
	return out, nil
}

// GetCommand returns the app's command, or store.ErrNotFound.
func (s *Store) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	if err := s.lock(ctx); err != nil {
		return store.Command{}, err
	}
	defer s.mu.Unlock()
	c, ok := s.cmds[id]
	if !ok || c.AppKey != appKey {
		return store.Command{}, store.ErrNotFound
	}
	return clone(c)
}

// UpdateCommand applies fn to the app's command; see store.Commands.
func (s *Store) UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error) {
	if err := s.lock(ctx); err != nil {
		return store.Command{}, err
	}
	defer s.mu.Unlock()
	old, ok := s.cmds[id]
	if !ok || old.AppKey != appKey {
		return store.Command{}, store.ErrNotFound
	}
	c, err := clone(old)
	if err != nil {
		return store.Command{}, err
	}
	ended, err := store.ApplyCommandUpdate(&c, id, appKey, fn)
	if err != nil {
		return store.Command{}, err
	}
	evs := c.Emit
	c.Emit = nil
	stored, err := clone(c)
	if err != nil {
		return store.Command{}, fmt.Errorf("update command %d: %w", id, err)
	}
	s.cmds[id] = stored
	s.noteJobCommand(stored)
	if ended {
		k := devKey{appKey, c.DeviceName}
		s.cmdOpen[k] = removeSorted(s.cmdOpen[k], id)
		if len(s.cmdOpen[k]) == 0 {
			delete(s.cmdOpen, k)
		}
	}
	s.appendLocked(evs)
	return c, nil
}

// OpenCommands returns the device's open commands in id order.
func (s *Store) OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.cmdOpen[devKey{appKey, device}]
	out := make([]store.Command, 0, min(len(ids), limit))
	for _, id := range ids[:min(len(ids), limit)] {
		c, err := clone(s.cmds[id])
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// DueCommands returns open commands due at or before before, earliest
// first.
func (s *Store) DueCommands(ctx context.Context, before int64, limit int) ([]store.Command, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Command
	for _, ids := range s.cmdOpen {
		for _, id := range ids {
			if c := s.cmds[id]; c.Due() <= before {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.Command) int {
		return cmp.Or(cmp.Compare(a.Due(), b.Due()), cmp.Compare(a.ID, b.ID))
	})
	out = out[:min(len(out), limit)]
	for i := range out {
		c, err := clone(out[i])
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// LastCommandID returns the highest command id stored.
func (s *Store) LastCommandID(ctx context.Context) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.lastCmdID, nil
}
