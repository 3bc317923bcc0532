package message

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// stepPreparer is a store that does ahead, for a broadcast step's msgs,
// whatever of its CreateMessages needs no lock: an optional method
// outside the store.Store contract (Pebble has it; see
// store.BroadcastStep's Prepared). It locks and writes nothing, and what
// it returns goes into the step's Prepared; connected[i] says msgs[i]'s
// device was connected. A store without it does nothing ahead (Redis,
// whose write script reads what it needs): Prepared stays nil.
type stepPreparer interface {
	PrepareStep(ctx context.Context, appKey string, msgs []store.BatchMessage, connected []bool) (any, error)
}

// prepareStep returns what st's PrepareStep makes of msgs, or nil when st
// is no stepPreparer.
func prepareStep(ctx context.Context, st any, appKey string, msgs []store.BatchMessage, connected []bool) (any, error) {
	if sp, ok := st.(stepPreparer); ok {
		return sp.PrepareStep(ctx, appKey, msgs, connected)
	}
	return nil, nil
}

// fanoutRun and fanoutRunTime bound one broadcast's turn at the full
// pace (stepRun): about this many targets, for at most about this long,
// before the next broadcast's turn.
const (
	fanoutRun     = 5000
	fanoutRunTime = 200 * time.Millisecond
)

// yieldWindow is how long after a single send the fan-out still gives
// way to single sends.
const yieldWindow = time.Second

func (br *Broadcaster) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(br.cfg.Poll)
	defer t.Stop()
	for {
		bs := br.active(ctx)
		for len(bs) > 0 && ctx.Err() == nil {
			bs = br.round(ctx, bs)
			// A broadcast accepted here meanwhile joins at once; one
			// accepted on another node, at the next poll.
			select {
			case <-br.wake:
				bs = br.active(ctx)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-br.wake:
		}
	}
}

// active lists the broadcasts with fan-out or sweep work left.
func (br *Broadcaster) active(ctx context.Context) []store.Broadcast {
	bs, err := br.store.ActiveBroadcasts(ctx)
	if err != nil && ctx.Err() == nil {
		br.log.Error("broadcast: list active broadcasts", "err", err)
	}
	return bs
}

// round carries each of bs one step on, a chunk of its fan-out or, once
// cancelled, its sweep, and returns those with work left. Broadcasts
// share the fan-out chunk by chunk, so one app's large broadcasts do not
// hold back another app's small one (the outside tester's 2-device
// broadcast waited 33 s behind five of 20,000). One that fails waits for
// the next poll.
func (br *Broadcaster) round(ctx context.Context, bs []store.Broadcast) []store.Broadcast {
	next := bs[:0]
	for _, b := range bs {
		var err error
		switch {
		case b.State == store.BroadcastFanningOut && (br.sending() || b.Chunks-b.Chunk < 2):
			b, err = br.step(ctx, b)
		case b.State == store.BroadcastFanningOut:
			b, err = br.stepRun(ctx, b, max(1, fanoutRun/br.cfg.Chunk))
		case b.State == store.BroadcastCancelled && !b.Swept:
			if err = br.sweep(ctx, b); err == nil {
				b.Swept = true
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				br.log.Error("broadcast: fan-out", "app", b.AppKey, "broadcast", b.ID, "err", err)
			}
			continue
		}
		if b.Active() {
			next = append(next, b)
		} else {
			br.forgetAccepted(b.ID)
		}
	}
	return next
}

// step makes the messages of b's next chunk of targets and moves b past
// the chunk in the same write, and returns b as it is then. A crash
// before the write leaves b at the chunk, so the chunk is made again;
// after it, b is past the chunk: no device gets two messages. A step
// that finds b moved on (cancelled, or stepped by another node) writes
// nothing and returns b reread.
//
// A target deleted since b was accepted gets nothing (and is not
// queued), nor does a device created again under its name after b's
// second; one disabled since gets its message failed at once, as its
// pending messages were when it was disabled (record 5, code 3003).
func (br *Broadcaster) step(ctx context.Context, b store.Broadcast) (store.Broadcast, error) {
	w, err := br.prepare(ctx, b, b.Chunk, nil)
	if err != nil {
		return b, err
	}
	outcomes, moved, err := br.write(ctx, b, w)
	if err != nil {
		return b, err
	}
	if !moved {
		br.announce(ctx, b, w, outcomes)
	}
	return br.store.GetBroadcast(ctx, b.AppKey, b.ID)
}

// chunkWork is one chunk of a broadcast's targets made into messages,
// ready for the write that moves the broadcast past the chunk.
type chunkWork struct {
	chunk int
	// missing says the chunk's targets were gone when read: the
	// broadcast had moved on, or the chunk is lost (see write).
	missing bool
	msgs    []store.BatchMessage
	devs    []store.Device
	// epoch is the store's FlagEpoch before devs were read (epochOK
	// false if it cannot tell).
	epoch   uint64
	epochOK bool
	// prepared is what the store's PrepareStep returned for msgs: the
	// part of the step's write that needs no lock (Pebble: encoding the
	// messages and reading their devices' pending counts), done here in
	// prepare's goroutine, not in stepRun's serial write stage.
	prepared any
}

// prepare reads chunk n of b's targets and their devices, after taking
// their tokens of the pace, and makes their messages; with turns, it
// makes them (takes their msgids) in chunk n's turn.
func (br *Broadcaster) prepare(ctx context.Context, b store.Broadcast, n int, turns *chunkTurns) (chunkWork, error) {
	w := chunkWork{chunk: n}
	var names []string
	if n < b.Chunks {
		var err error
		names, err = br.store.BroadcastTargets(ctx, b.AppKey, b.ID, n)
		if errors.Is(err, store.ErrNotFound) {
			w.missing = true
			if !turns.wait(n) {
				return w, errTurnsStopped
			}
			turns.done(n)
			return w, nil
		}
		if err != nil {
			return w, err
		}
	}
	if err := br.wait(ctx, len(names)); err != nil {
		return w, err
	}
	now := br.now()
	req := SendRequest{Body: b.Body, TTL: b.TTL, CallbackURL: b.CallbackURL, Params: b.Params}
	// A target deleted since the broadcast was accepted is not among
	// devs; a device created under its name since is another device.
	w.epoch, w.epochOK = flagEpochOf(br.store)
	var devs []store.Device
	if br.acceptedUnchanged(b.ID, w.epoch, w.epochOK) {
		devs = br.targetDevices(b.AppKey, names)
	} else {
		var err error
		if devs, err = br.store.GetDevices(ctx, b.AppKey, names); err != nil {
			return w, fmt.Errorf("targets of broadcast %d: %w", b.ID, err)
		}
		devs = slices.DeleteFunc(devs, func(d store.Device) bool { return d.TimeCreate > b.TimeCreate })
	}
	if !turns.wait(n) {
		return w, errTurnsStopped
	}
	msgs := make([]store.BatchMessage, 0, len(devs))
	connected := make([]bool, 0, len(devs))
	for _, d := range devs {
		connected = append(connected, d.Status == 1) // 1: online
		bm := br.svc.newMessage(b.AppKey, enabled(d), req, now)
		if d.Flag != store.FlagEnabled {
			m := &bm.Message
			m.State = store.StateFailed
			m.Records = append(m.Records[:2:2], NewRecord(*m, store.RecordDeliveryFailure, ErrCodeDeviceDisabled, "device disabled", now))
		}
		bm.Message.Broadcast, bm.Full.Broadcast = b.ID, b.ID
		msgs = append(msgs, bm)
	}
	turns.done(n)
	w.msgs, w.devs = msgs, devs
	var err error
	if w.prepared, err = prepareStep(ctx, br.store, b.AppKey, msgs, connected); err != nil {
		return w, fmt.Errorf("broadcast %d: %w", b.ID, err)
	}
	return w, nil
}

// maxAccepted bounds Broadcaster.accepted; past it, the epochs are
// forgotten, and those broadcasts' fan-outs read their devices.
const maxAccepted = 1024

// acceptedUnchanged reports whether the store's FlagEpoch, epoch (ok as
// FlagEpoch's), is still what it was before broadcast id's targets were
// listed when it was accepted here. Then no device's flag changed and no
// device was deleted since (see flagEpocher): every target
// still exists, is enabled, and is the device that was listed (a device
// created again under its name would have been deleted first). A
// broadcast accepted on another node or before a restart is not known
// here: its devices are read.
func (br *Broadcaster) acceptedUnchanged(id int64, epoch uint64, ok bool) bool {
	if !ok {
		return false
	}
	br.acceptedMu.Lock()
	defer br.acceptedMu.Unlock()
	at, known := br.accepted[id]
	return known && at == epoch
}

// forgetAccepted drops what acceptedUnchanged knows of broadcast id.
func (br *Broadcaster) forgetAccepted(id int64) {
	br.acceptedMu.Lock()
	delete(br.accepted, id)
	br.acceptedMu.Unlock()
}

// targetDevices returns the app's devices of names as the fan-out needs
// them when acceptedUnchanged holds, without reading them: enabled, and
// online (Status 1) when the router has them connected. Reading a chunk's
// devices was a third of a 100,000-device broadcast's preparing, most of
// it decoding whole devices to learn that nothing had changed. Only a
// store whose devices one process changes tells a FlagEpoch (not Redis,
// in cluster mode), so no device is connected to another node, and the
// router's word is all a message's delivery needs of Status.
func (br *Broadcaster) targetDevices(appKey string, names []string) []store.Device {
	devs := make([]store.Device, len(names))
	for i, n := range names {
		d := &devs[i]
		d.AppKey, d.Name, d.Flag = appKey, n, store.FlagEnabled
		if br.svc.router.Online(*d) {
			d.Status = 1 // online
		}
	}
	return devs
}

// write stores w's messages with the step past its chunk in one write
// and returns their outcomes; moved says b was no longer at the chunk
// (cancelled, or stepped by another node), and nothing was written.
func (br *Broadcaster) write(ctx context.Context, b store.Broadcast, w chunkWork) (outcomes []int, moved bool, err error) {
	if w.missing {
		now, err := br.store.GetBroadcast(ctx, b.AppKey, b.ID)
		if err != nil {
			return nil, false, err
		}
		if now.Chunk != w.chunk || now.State != store.BroadcastFanningOut {
			return nil, true, nil
		}
		// Not moved on, yet the chunk is gone: stepping past it is
		// all that can be done.
		br.log.Error("broadcast: a chunk of targets is missing", "app", b.AppKey, "broadcast", b.ID, "chunk", w.chunk)
	}
	step := &store.BroadcastStep{AppKey: b.AppKey, ID: b.ID, Chunk: w.chunk, Done: w.chunk+1 >= b.Chunks, Epoch: w.epoch, EpochOK: w.epochOK, Prepared: w.prepared}
	outcomes, err = br.store.CreateMessages(ctx, b.AppKey, w.msgs, nil, step)
	if errors.Is(err, store.ErrVersionConflict) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return outcomes, false, nil
}

// announce hands a written chunk's pending messages to the dispatcher,
// after failing those whose devices were disabled or deleted while the
// chunk was made (settleDisabled). When the store's FlagEpoch is what
// it was before the chunk's devices were read, no flag of theirs changed
// and none was deleted since: what prepare read still holds, so the
// devices are not read again.
func (br *Broadcaster) announce(ctx context.Context, b store.Broadcast, w chunkWork, outcomes []int) {
	read := func(names []string) ([]store.Device, error) { return br.store.GetDevices(ctx, b.AppKey, names) }
	if err := br.svc.announce(ctx, b.AppKey, w.msgs, w.devs, outcomes, flagMark{w.epoch, w.epochOK}, read); err != nil {
		// The step is stored; its messages wait for their devices.
		br.log.Error("broadcast: check the targets' flags after a step", "app", b.AppKey, "broadcast", b.ID, "err", err)
	}
}

// stepRun reaches up to n chunks of b, one write each as step does, in
// a pipeline: while one chunk is written, the next ones are read and made
// into messages (by stepPreparers goroutines, chunk by chunk in turn)
// and the one before is announced, so the fan-out uses more than one
// core. It stops early when b moves on or single sends begin (the next
// round steps at the yield pace), and ends its turn after
// fanoutRunTime; it returns b reread.
// A chunk made but not written when it stops is made again later, with
// new msgids: nothing of it was stored.
func (br *Broadcaster) stepRun(ctx context.Context, b store.Broadcast, n int) (store.Broadcast, error) {
	prepCtx, stop := context.WithCancel(ctx)
	defer stop()
	last := min(b.Chunk+n, b.Chunks)
	turns := newChunkTurns(b.Chunk)
	ready := make([]chan chunkWork, stepPreparers)
	var prepMu sync.Mutex
	var prepErr error
	start := br.now()
	for k := range ready {
		ready[k] = make(chan chunkWork, 1)
		go func(out chan<- chunkWork) {
			defer close(out)
			for c := b.Chunk + k; c < last; c += stepPreparers {
				if c > b.Chunk && (br.sending() || br.now().Sub(start) > fanoutRunTime) {
					turns.stop()
					return
				}
				w, err := br.prepare(prepCtx, b, c, turns)
				if err != nil {
					if !errors.Is(err, errTurnsStopped) {
						prepMu.Lock()
						prepErr = cmp.Or(prepErr, err)
						prepMu.Unlock()
					}
					turns.stop()
					return
				}
				select {
				case out <- w:
				case <-prepCtx.Done():
					return
				}
			}
		}(ready[k])
	}
	type written struct {
		w        chunkWork
		outcomes []int
	}
	announced := make(chan written, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for d := range announced {
			br.announce(ctx, b, d.w, d.outcomes)
		}
	}()
	var err error
	stopped := false
	// The chunks come in order, each from its preparer's channel; the
	// first channel closed ends the run (its preparer stopped, and the
	// chunks after it are not written).
	for c := b.Chunk; c < last; c++ {
		w, ok := <-ready[(c-b.Chunk)%stepPreparers]
		if !ok {
			break
		}
		outcomes, moved, werr := br.write(ctx, b, w)
		if werr != nil || moved {
			err, stopped = werr, true
			break
		}
		announced <- written{w, outcomes}
	}
	stop()
	turns.stop()
	for _, ch := range ready {
		for range ch { // drained, so the preparers end
		}
	}
	close(announced)
	wg.Wait()
	if err != nil {
		return b, err
	}
	if prepErr != nil && !stopped {
		return b, prepErr
	}
	return br.store.GetBroadcast(ctx, b.AppKey, b.ID)
}

// stepPreparers is how many goroutines of stepRun prepare chunks: one
// could not keep up with the write stage once the step's encoding and
// count reads moved into it (reading a chunk's devices alone was most of
// the write's time).
const stepPreparers = 2

// errTurnsStopped ends a preparer whose turn will not come: the run
// stopped.
var errTurnsStopped = errors.New("fan-out run stopped")

// chunkTurns has stepRun's preparers make their chunks' messages in
// chunk order, so that msgids grow with the chunks as they are written
// (a count made while a broadcast fans out holds the messages up to its
// LastID then, and completes itself with those after: see countRest). A
// nil *chunkTurns orders nothing.
type chunkTurns struct {
	mu      sync.Mutex
	cond    *sync.Cond
	next    int
	stopped bool
}

func newChunkTurns(first int) *chunkTurns {
	t := &chunkTurns{next: first}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// wait waits for chunk n's turn; false if the run stopped first.
func (t *chunkTurns) wait(n int) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.next != n && !t.stopped {
		t.cond.Wait()
	}
	return !t.stopped
}

// done ends chunk n's turn.
func (t *chunkTurns) done(n int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.next = n + 1
	t.mu.Unlock()
	t.cond.Broadcast()
}

// stop wakes every waiter with false.
func (t *chunkTurns) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cond.Broadcast()
}

// wait takes n messages' tokens: from the yield pace while single sends
// are made (and from the full pace too, so that neither is exceeded),
// from the full pace otherwise. A wait on the yield pace that sees the
// sends stop ends early and goes on at the full pace.
func (br *Broadcaster) wait(ctx context.Context, n int) error {
	n = max(n, 1)
	if br.sending() {
		r := br.yield.ReserveN(br.now(), min(n, br.yield.Burst()))
		delay := r.DelayFrom(br.now())
		t := time.NewTimer(delay)
		defer t.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
	waiting:
		for {
			select {
			case <-ctx.Done():
				r.Cancel()
				return ctx.Err()
			case <-t.C:
				break waiting
			case <-tick.C:
				if !br.sending() {
					r.Cancel()
					break waiting
				}
			}
		}
	}
	return br.pace.WaitN(ctx, min(n, br.pace.Burst()))
}

// sending reports whether a single send began within yieldWindow.
func (br *Broadcaster) sending() bool { return br.svc.sendingAt(br.now()) }

// Sending reports whether a single send began within the last second:
// the fan-outs of broadcasts and jobs give way to single sends while it
// does.
func (s *Service) Sending() bool { return s.sendingAt(s.now()) }

func (s *Service) sendingAt(now time.Time) bool {
	last := s.lastSend.Load()
	return last != 0 && now.UnixNano()-last < int64(yieldWindow)
}

// enabled returns d as an enabled device.
func enabled(d store.Device) store.Device {
	d.Flag = store.FlagEnabled
	return d
}

// errNotPending leaves a message that is no longer pending as it is.
var errNotPending = errors.New("not pending")

// sweep retracts the pending messages of a cancelled broadcast (record
// 7) and marks it swept. A crash midway sweeps again: messages already
// retracted are left alone.
func (br *Broadcaster) sweep(ctx context.Context, b store.Broadcast) error {
	err := br.eachMessage(ctx, b, func(m store.Message) error {
		if m.State != store.StatePending {
			return nil
		}
		_, err := br.store.UpdateMessage(ctx, b.AppKey, m.ID, func(m *store.Message) error {
			if m.State != store.StatePending {
				return errNotPending
			}
			m.State = store.StateRetracted
			m.Records = append(m.Records, NewRecord(*m, store.RecordRetractSuccess, 0, "", br.now()))
			return nil
		})
		if errors.Is(err, errNotPending) || errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	_, err = br.store.UpdateBroadcast(ctx, b.AppKey, b.ID, func(b *store.Broadcast) error {
		b.Swept = true
		return nil
	})
	return err
}
