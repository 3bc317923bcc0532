package pebble

// A device's open-command count is the number of its O/ entries. A send
// checks it against store.MaxOpenCommands, and counting the entries cost
// an iterator seek per command (6 to 10% of the server's CPU with commands
// sent at 2,000/s). The count is now counted the first time a write needs
// it and kept in openCmds, which every write that adds or removes an O/
// entry updates under the device's stripe after its commit (or drops,
// when the commit failed and its outcome is unknown).

// openCountAdd adds d to the device's open-command count, if kept; under
// its stripe, after the commit that added or removed d O/ entries.
func (s *Store) openCountAdd(app, device string, d int) {
	s.openCmds.mu.Lock()
	defer s.openCmds.mu.Unlock()
	k := cacheKey(app, device)
	if n, ok := s.openCmds.m[k]; ok {
		s.openCmds.m[k] = n + d
	}
}
