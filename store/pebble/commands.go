package pebble

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Device commands.
//
// A job's command is written with its execution (jobexecs.go) in every
// batch that writes it.
//
// Keys: o/<id> → Command (JSON); O/<app>\0<device>\0<id> → empty, the
// device's open commands in id order; D/<due ms><id> → the app key, the
// open commands by when they are due (store.Command.Due). Every write
// of a command holds its device's stripe across its commit, as message
// writes do; a synced one across its sync. A lazy one (store.Command.Lazy)
// is not synced: a reader under the stripe may see it, and it becomes
// durable with the next synced write or Barrier.
const (
	pCmd     = "o/"
	pCmdOpen = "O/"
	pCmdDue  = "D/"
)

func cmdKey(id int64) []byte {
	return binary.BigEndian.AppendUint64([]byte(pCmd), uint64(id))
}

func cmdOpenPrefix(app, device string) []byte {
	return append(key(pCmdOpen, app, device), 0)
}

func cmdOpenKey(app, device string, id int64) []byte {
	return binary.BigEndian.AppendUint64(cmdOpenPrefix(app, device), uint64(id))
}

func cmdDueKey(due, id int64) []byte {
	b := binary.BigEndian.AppendUint64([]byte(pCmdDue), uint64(due))
	return binary.BigEndian.AppendUint64(b, uint64(id))
}

// deviceExists reads whether the device exists; under its stripe.
func (s *Store) deviceExists(app, name string) (bool, error) {
	if _, ok := s.devices.get(app, name); ok {
		return true, nil
	}
	return s.exists(key(pDevice, app, name))
}

// openCount counts the device's open commands; under its stripe. The
// count is kept in memory after the first (cmdcount.go).
func (s *Store) openCount(app, device string) (int, error) {
	if n, ok := s.openCmds.get(app, device); ok {
		return n, nil
	}
	p := cmdOpenPrefix(app, device)
	n := 0
	err := s.scan(p, prefixEnd(p), func(_, _ []byte) (bool, error) {
		n++
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	s.openCmds.put(app, device, n)
	return n, nil
}

// cmdIndexed is what a command's index entries were before a write: an
// open entry and a due entry at due when open (the zero value for a new
// command).
type cmdIndexed struct {
	open bool
	due  int64
}

// indexed is what c's index entries are once it is written.
func indexed(c store.Command) cmdIndexed {
	return cmdIndexed{open: c.Open(), due: c.Due()}
}

// putCommand adds c, and the index entries it gains, to b; it returns
// the size of c encoded. The entries it loses are the caller's to delete
// (dropIndex). An entry c keeps is not written again: most writes of a
// command (sent, delivered) change neither. The caller notes a due entry
// set (noteDue) once the batch is committed, as dueFloor asks.
func (s *Store) putCommand(b *pebble.Batch, c store.Command, was cmdIndexed) (int, error) {
	size, err := putRecord(b, &c)
	if err != nil || !c.Open() {
		return size, err
	}
	if !was.open {
		if err := set(b, cmdOpenKey(c.AppKey, c.DeviceName, c.ID), nil); err != nil {
			return 0, err
		}
	}
	due, ok := dueSet(c, was)
	if !ok {
		return size, nil
	}
	return size, set(b, cmdDueKey(due, c.ID), []byte(c.AppKey))
}

// putRecord adds command c itself (C/) to b and returns its size.
func putRecord(b *pebble.Batch, c *store.Command) (int, error) {
	buf := cmdBufs.Get().(*[]byte)
	defer cmdBufs.Put(buf)
	raw, err := appendCommand((*buf)[:0], c)
	if err != nil {
		return 0, fmt.Errorf("encode command %d: %w", c.ID, err)
	}
	if cap(raw) <= cmdBufMax {
		*buf = raw
	}
	return len(raw), set(b, cmdKey(c.ID), raw) // the batch copies raw
}

// putNewCommands is putCommand for each of cmds, new commands (indexed
// as cmdIndexed{}), with each one's size in sizes. It adds the commands
// (C/), then their due entries (D/), then their open entries (O/), each
// in the order of cmds (ids ascending, as a send makes them), rather
// than command by command. Pebble inserts a batch into its memtable in
// the batch's order, and an insert next to the one before it skips most
// of the skiplist's search: a batch of 1,000 commands went into a
// memtable of 100 such batches in about 1.3 ms, against 1.8 ms
// interleaved.
func (s *Store) putNewCommands(b *pebble.Batch, cmds []store.Command, sizes []int) error {
	for i := range cmds {
		var err error
		if sizes[i], err = putRecord(b, &cmds[i]); err != nil {
			return err
		}
	}
	for i := range cmds {
		if due, ok := dueSet(cmds[i], cmdIndexed{}); ok {
			if err := set(b, cmdDueKey(due, cmds[i].ID), []byte(cmds[i].AppKey)); err != nil {
				return err
			}
		}
	}
	for i := range cmds {
		if cmds[i].Open() {
			if err := set(b, cmdOpenKey(cmds[i].AppKey, cmds[i].DeviceName, cmds[i].ID), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// cmdBufs holds the buffers putCommand encodes commands into: a command
// is encoded by each of its writes, and growing a fresh buffer for each
// was a tenth of the server's allocations under command load.
var cmdBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// cmdBufMax is the largest buffer cmdBufs keeps: params and results
// reach 256 KiB, and most commands are far smaller.
const cmdBufMax = 16 << 10

// dropIndex adds to b the deletes of the index entries c, indexed as was
// before, loses by its write.
//
// They are SingleDeletes, as the message queue's (unqueue): a command
// answered within the memtable's life then leaves nothing of its open
// and due entries on disk, where a Delete is carried down every level.
// Pebble requires that the key was Set at most once since it was last
// deleted, which holds: both keys hold the command's id, putCommand sets
// the open entry only as the command is created (was.open false) and a
// due entry only when the due moves, in the write that deletes the old
// one, and a command that has ended is never open again
// (store.ApplyCommandUpdate).
func dropIndex(b *pebble.Batch, c store.Command, was cmdIndexed) error {
	if !was.open {
		return nil
	}
	if !c.Open() || c.Due() != was.due {
		if err := b.SingleDelete(cmdDueKey(was.due, c.ID), nil); err != nil {
			return err
		}
	}
	if !c.Open() {
		return b.SingleDelete(cmdOpenKey(c.AppKey, c.DeviceName, c.ID), nil)
	}
	return nil
}

// CreateCommands stores cmds with seq in one synced write; see
// store.Commands.
func (s *Store) CreateCommands(ctx context.Context, appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq) ([]store.Command, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	return s.createCommands(appKey, cmds, seqNo, seq, nil)
}

// createCommands is CreateCommands inside enter. The write holds the
// stripes of the commands' devices (and of the seq_no) from the
// admission to the sync, and stores, with the commands, the executions
// of those of a job (jobexecs.go) and, when step is not nil, the job
// StartJob moves (the caller holding the job's lock).
func (s *Store) createCommands(appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq, step *jobStep) ([]store.Command, error) {
	stripes := make([]int, 0, len(cmds)+1)
	for _, c := range cmds {
		stripes = append(stripes, deviceStripe(appKey, c.DeviceName))
	}
	if seq != nil {
		stripes = append(stripes, seqStripe(appKey, seqNo))
	}
	// Released before the fsync, and by the defer on an early return.
	unlock := sync.OnceFunc(s.lockStripes(stripes))
	defer unlock()
	if seq != nil {
		if err := s.checkSeqFree(appKey, seqNo, &store.SeqEntry{}); err != nil {
			return nil, err
		}
	}
	out, err := s.admitCommands(appKey, cmds)
	if err != nil {
		return nil, err
	}
	var e *store.SeqEntry
	if seq != nil {
		e = seq(out)
	}
	ex, err := s.prepareExecs(appKey, out, step)
	if err != nil {
		return nil, fmt.Errorf("create commands: %w", err)
	}
	defer ex.release()
	sizes := make([]int, len(out))
	w, err := s.applyEvents(func(b *pebble.Batch) ([]store.Event, error) {
		var evs []store.Event
		for i := range out {
			evs = append(evs, store.Stamp(out[i].Emit, appKey, out[i].DeviceName)...)
			out[i].Emit = nil
		}
		if err := s.putNewCommands(b, out, sizes); err != nil {
			return nil, err
		}
		if err := ex.put(b); err != nil {
			return nil, err
		}
		if step != nil {
			if err := putJob(b, step.job); err != nil {
				return nil, err
			}
		}
		return evs, putSeq(b, appKey, seqNo, e)
	})
	for i := range out {
		s.noteDue(out[i], cmdIndexed{})
	}
	forget := func(err error) ([]store.Command, error) {
		for i := range out {
			s.openCmds.drop(appKey, out[i].DeviceName)
			s.cmds.forget(out[i].ID)
		}
		ex.forget()
		return nil, fmt.Errorf("create commands: %w", err)
	}
	if err != nil {
		return forget(err)
	}
	ex.apply()
	for i := range out {
		if out[i].Open() {
			s.openCountAdd(appKey, out[i].DeviceName, 1)
		}
		s.cmds.put(out[i], sizes[i])
	}
	// Reads see the commands now; the writes of the same devices that
	// wait for the stripes need not wait for this one's fsync too.
	unlock()
	if err := w.durable(); err != nil {
		return forget(err)
	}
	return out, nil
}

// getCommand reads command id of appKey: from cmdCache when it holds
// it, else from the store.
func (s *Store) getCommand(appKey string, id int64) (store.Command, error) {
	c, ok := s.cmds.get(id)
	if !ok {
		var err error
		if c, err = s.readCommand(id); err != nil {
			return store.Command{}, err
		}
	}
	if c.AppKey != appKey {
		return store.Command{}, store.ErrNotFound
	}
	return c, nil
}

// readCommand reads command id from the store. It is apart from
// getCommand so that the decode's pointer does not put getCommand's
// command on the heap when the cache answers.
func (s *Store) readCommand(id int64) (store.Command, error) {
	raw, err := s.get(cmdKey(id))
	if err != nil {
		return store.Command{}, err
	}
	c := new(store.Command)
	if err := json.Unmarshal(raw, c); err != nil {
		return store.Command{}, fmt.Errorf("decode command %d: %w", id, err)
	}
	return *c, nil
}

// GetCommand returns the app's command, or store.ErrNotFound.
func (s *Store) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	if err := s.enter(ctx); err != nil {
		return store.Command{}, err
	}
	defer s.exit()
	return s.getCommand(appKey, id)
}

// UpdateCommand applies fn to the app's command under its device's
// stripe; see store.Commands. A lazy change is committed unsynced
// (writeLazy): still under the stripe, so the writes of one command stay
// in order in the WAL, and a later synced write of it makes it durable.
func (s *Store) UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error) {
	if err := s.enter(ctx); err != nil {
		return store.Command{}, err
	}
	defer s.exit()
	c, release, err := s.lockCommand(appKey, id)
	if err != nil {
		return store.Command{}, err
	}
	unlock := sync.OnceFunc(release) // released before the fsync, or by the defer
	defer unlock()
	was := indexed(c)
	if err := applyBoxed(&c, id, appKey, fn); err != nil {
		return store.Command{}, err
	}
	evs := c.Emit
	lazy := c.Lazy && len(evs) == 0 && c.Open()
	c.Emit, c.Lazy = nil, false
	ex, err := s.prepareExecs(appKey, []store.Command{c}, nil)
	if err != nil {
		return store.Command{}, fmt.Errorf("update command %d: %w", id, err)
	}
	defer ex.release()
	var written int
	fill := func(b *pebble.Batch) error {
		if err := dropIndex(b, c, was); err != nil {
			return err
		}
		w, perr := s.putCommand(b, c, was)
		written = w
		if perr != nil {
			return perr
		}
		return ex.put(b)
	}
	var w *applied
	if lazy {
		err = s.writeLazy(fill)
	} else {
		w, err = s.applyEvents(func(b *pebble.Batch) ([]store.Event, error) { return evs, fill(b) })
	}
	s.noteDue(c, was)
	forget := func(err error) (store.Command, error) {
		s.openCmds.drop(appKey, c.DeviceName)
		s.cmds.forget(id)
		ex.forget()
		return store.Command{}, fmt.Errorf("update command %d: %w", id, err)
	}
	if err != nil {
		return forget(err)
	}
	if was.open && !c.Open() {
		s.openCountAdd(appKey, c.DeviceName, -1)
	}
	ex.apply()
	s.cmds.put(c, written)
	if w != nil {
		// As in createCommands: the stripe's next writer need not wait
		// for this write's fsync.
		unlock()
		if err := w.durable(); err != nil {
			return forget(err)
		}
	}
	return c, nil
}

// cmdBoxes hold the commands applyBoxed hands to an update.
var cmdBoxes = sync.Pool{New: func() any { return new(store.Command) }}

// applyBoxed is store.ApplyCommandUpdate on a pooled copy of *c, copied
// back: the update is a function value, so a command it is given a
// pointer to goes to the heap, and UpdateCommand's did for every write
// (a thirtieth of the server's allocations under command load).
func applyBoxed(c *store.Command, id int64, appKey string, fn func(*store.Command) error) error {
	box := cmdBoxes.Get().(*store.Command)
	*box = *c
	_, err := store.ApplyCommandUpdate(box, id, appKey, fn)
	if err == nil {
		*c = *box
	}
	*box = store.Command{}
	cmdBoxes.Put(box)
	return err
}

// lockCommand locks the stripe of the device of the app's command id
// and reads the command under it. The device is known from cmdCache
// when the command is there (a command never changes device), else from
// a first read.
func (s *Store) lockCommand(appKey string, id int64) (store.Command, func(), error) {
	dev, ok := s.cmds.device(id)
	if !ok {
		c, err := s.getCommand(appKey, id)
		if err != nil {
			return store.Command{}, nil, err
		}
		dev = c.DeviceName
	}
	i := deviceStripe(appKey, dev)
	s.locks[i].Lock()
	c, err := s.getCommand(appKey, id)
	if err == nil && c.DeviceName != dev {
		err = fmt.Errorf("command %d: device %q, cached as %q", id, c.DeviceName, dev)
	}
	if err != nil {
		s.locks[i].Unlock()
		return store.Command{}, nil, err
	}
	return c, s.locks[i].Unlock, nil
}

// OpenCommands returns the device's open commands in id order.
func (s *Store) OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	p := cmdOpenPrefix(appKey, device)
	var ids []int64
	err := s.scan(p, prefixEnd(p), func(k, _ []byte) (bool, error) {
		ids = append(ids, int64(binary.BigEndian.Uint64(k[len(p):])))
		return len(ids) < limit, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Command, 0, len(ids))
	for _, id := range ids {
		c, err := s.getCommand(appKey, id)
		if err != nil {
			continue // ended meanwhile
		}
		out = append(out, c)
	}
	return out, nil
}

// DueCommands returns open commands due at or before before, earliest
// first.
func (s *Store) DueCommands(ctx context.Context, before int64, limit int) ([]store.Command, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	type ref struct {
		app string
		id  int64
	}
	var refs []ref
	start, full := s.due.begin(time.Now())
	lo := cmdDueKey(start, 0)
	hi := cmdDueKey(before+1, 0)
	if start == 0 {
		lo = []byte(pCmdDue)
	}
	next := before + 1
	err := s.scan(lo, hi, func(k, v []byte) (bool, error) {
		if len(k) != len(pCmdDue)+16 {
			return false, fmt.Errorf("due commands: malformed key %q", k)
		}
		if len(refs) == 0 {
			next = int64(binary.BigEndian.Uint64(k[len(pCmdDue):]))
		}
		refs = append(refs, ref{string(v), int64(binary.BigEndian.Uint64(k[len(pCmdDue)+8:]))})
		return len(refs) < limit, nil
	})
	s.due.end(next, full, err == nil)
	if err != nil {
		return nil, err
	}
	out := make([]store.Command, 0, len(refs))
	for _, r := range refs {
		c, err := s.getCommand(r.app, r.id)
		if err != nil || !c.Open() {
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// LastCommandID returns the highest command id stored (command keys
// sort by id).
func (s *Store) LastCommandID(ctx context.Context) (int64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.exit()
	k, err := s.lastKey(pCmd)
	if err != nil || k == nil {
		return 0, err
	}
	if len(k) != len(pCmd)+8 {
		return 0, fmt.Errorf("last command id: malformed key %q", k)
	}
	return int64(binary.BigEndian.Uint64(k[len(pCmd):])), nil
}
