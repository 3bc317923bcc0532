package delivery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// CommandStore is what the CommandSender reads and writes: a device's
// open commands, Barrier before it hands the device what it read, the
// delivered states of commands (cmdacks.go), and the job a queued
// command belongs to.
type CommandStore interface {
	OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error)
	GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error)
	UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error)
	Barrier(ctx context.Context) error
	GetJob(ctx context.Context, appKey string, id int64) (store.Job, error)
}

var _ CommandStore = store.Store(nil)

// requestConn is a Conn that can publish a request with MQTT 5's Response
// Topic and Correlation Data (broker.Session).
type requestConn interface {
	PublishRequest(topic string, payload []byte, responseTopic string, correlation []byte) (uint16, error)
}

// windowRequestConn is a requestConn that keeps the device's window,
// shared with messages (broker.Session): see windowConn. A command takes
// the next free place ahead of any message; one that finds the window
// full waits for a place (PublishRequestWithin with waited false), and
// the places that free go to the waiting commands, in order, before any
// message (waited true), until each is sent or given up (UnwaitRequest).
type windowRequestConn interface {
	PublishRequestWithin(limit int, waited bool, topic string, payload []byte, responseTopic string, correlation []byte) (uint16, bool, error)
	WaitRequest()
	UnwaitRequest()
}

// CommandSender puts commands on device connections, in the window of
// unacknowledged publishes they share with messages (Receive Maximum),
// ahead of the message queue: a command takes the next free place, so
// a backlog of messages never delays it, and it waits only for a place
// that a publish in flight holds until its PUBACK. It keeps only the
// commands awaiting their PUBACK or a place, per connection, so a device
// that never gets a command costs nothing here; a connection that had
// one keeps its (empty) map of commands in flight until it ends.
type CommandSender struct {
	store CommandStore
	svc   *command.Service
	log   *slog.Logger
	now   func() time.Time
	// freed, when set, is told of a place a command left in a
	// connection's window (Dispatcher.Freed).
	freed func(c Conn, app, dev string)

	mu       sync.Mutex
	inflight map[Conn]map[uint16]cmdRef
	// waiting holds, per connection, the ids of the commands waiting
	// for a place in its window, in accepted order.
	waiting map[Conn][]int64
	// active counts the commands being published, awaiting their PUBACK
	// or a place: while it is 0, a PUBACK is a message's, found at once.
	active atomic.Int64

	// locks order the sends to one device (accepted order).
	locks deviceLocks

	// acks stores the delivered states (cmdacks.go).
	acks *cmdAckStage
}

type cmdRef struct {
	app, dev string
	id       int64
}

func refOf(c store.Command) cmdRef { return cmdRef{c.AppKey, c.DeviceName, c.ID} }

// NewCommandSender returns a CommandSender recording sends and PUBACKs
// with svc.
func NewCommandSender(st CommandStore, svc *command.Service, log *slog.Logger) *CommandSender {
	cs := &CommandSender{store: st, svc: svc, log: log, now: time.Now, inflight: map[Conn]map[uint16]cmdRef{}, waiting: map[Conn][]int64{}}
	cs.acks = newCmdAckStage(cs)
	return cs
}

// SetFreed has the sender tell f of each place a command leaves in a
// connection's window, so that messages waiting for it go: call before
// devices connect.
func (cs *CommandSender) SetFreed(f func(c Conn, app, dev string)) { cs.freed = f }

func (cs *CommandSender) lock(app, dev string) func() { return cs.locks.lock(app, dev) }

// Attach sends the device's commands that wait for it on connection c,
// in accepted order: all undelivered ones for a new subscription
// (resent ones carry the same cmd_id), only the queued ones when queued
// is set (another node said a command was queued). The device's sends,
// PUBACKs and this read are serialised, so what it reads is not
// overtaken by a send or PUBACK of the same command.
func (cs *CommandSender) Attach(ctx context.Context, c Conn, app, dev string, queued bool) {
	var sent []cmdRef
	defer func() { cs.recordSentOn(ctx, c, sent) }()
	defer cs.lock(app, dev)()
	open, err := cs.store.OpenCommands(ctx, app, dev, store.MaxOpenCommands)
	if err != nil {
		cs.log.Error("read a device's commands", "app", app, "device", dev, "err", err)
		return
	}
	if len(open) == 0 {
		return
	}
	if err := cs.store.Barrier(ctx); err != nil {
		cs.log.Error("read a device's commands", "app", app, "device", dev, "err", err)
		return
	}
	ended := cs.endedJobs(ctx, app, open)
	for _, cmd := range open {
		if queued && cmd.State != store.CmdQueued || cs.acks.acking(cmd.ID) {
			continue // a PUBACK came for it: its delivered state is on its way
		}
		if cmd.State == store.CmdQueued && ended[cmd.Job] {
			continue // its job was cancelled or aborted: the runner's sweep cancels it
		}
		if cs.publish(c, cmd) {
			sent = append(sent, refOf(cmd))
		}
	}
}

// endedJobs returns which of the jobs of cmds' queued commands have
// ended: a job cancelled or aborted cancels its queued commands in the
// background, and a device that connects meanwhile must not get them
// (the job's cancel has answered). A job that cannot be read counts as
// not ended: its commands go as they would without jobs.
func (cs *CommandSender) endedJobs(ctx context.Context, app string, cmds []store.Command) map[int64]bool {
	var ended map[int64]bool
	for _, cmd := range cmds {
		if cmd.Job == 0 || cmd.State != store.CmdQueued {
			continue
		}
		if _, seen := ended[cmd.Job]; seen {
			continue
		}
		if ended == nil {
			ended = map[int64]bool{}
		}
		j, err := cs.store.GetJob(ctx, app, cmd.Job)
		if err != nil {
			cs.log.Warn("read a command's job", "app", app, "job", cmd.Job, "err", err)
		}
		ended[cmd.Job] = err == nil && !store.JobActive(j.State)
	}
	return ended
}

// Send publishes cmd, which is durable, on c unless it is in flight on c
// already or can no longer be delivered, and records it sent; when that
// write finds it cancelled, the device gets cmd/cancel (command.SentAt).
func (cs *CommandSender) Send(ctx context.Context, c Conn, cmd store.Command) {
	unlock := cs.lock(cmd.AppKey, cmd.DeviceName)
	sent := cs.publish(c, cmd)
	unlock()
	if sent && cs.recordSent(ctx, refOf(cmd)) {
		cs.Cancel(c, cmd.ID)
	}
}

// publish puts cmd on c and records its packet id, under the device's
// lock; it reports whether it did. A command that finds c's window full,
// or commands waiting for a place already, waits behind them (drain).
// The sent state is written after the lock is released (recordSent), so
// the PUBACK's delivered write need not wait for it: either order ends
// delivered.
func (cs *CommandSender) publish(c Conn, cmd store.Command) bool {
	if !command.Deliverable(cmd, cs.now().UnixMilli()) {
		return false
	}
	cs.mu.Lock()
	for _, ref := range cs.inflight[c] {
		if ref.id == cmd.ID {
			cs.mu.Unlock()
			return false
		}
	}
	waiting := cs.waiting[c]
	if slices.Contains(waiting, cmd.ID) {
		cs.mu.Unlock()
		return false
	}
	cs.mu.Unlock()
	cs.active.Add(1)
	wc, windowed := c.(windowRequestConn)
	if windowed && len(waiting) > 0 {
		wc.WaitRequest()
		cs.wait(c, cmd.ID)
		return false
	}
	pid, sent, err := cs.write(c, cmd, false)
	if err != nil {
		cs.active.Add(-1)
		cs.log.Debug("publish a command", "app", cmd.AppKey, "device", cmd.DeviceName, "cmd_id", cmd.ID, "err", err)
		return false
	}
	if !sent {
		cs.wait(c, cmd.ID)
		return false
	}
	cs.record(c, pid, cmd)
	return true
}

// write publishes cmd on c, within c's window when c keeps one (waited:
// cmd waits for a place already); sent false when the window is full.
func (cs *CommandSender) write(c Conn, cmd store.Command, waited bool) (pid uint16, sent bool, err error) {
	payload := command.Payload(cmd)
	corr := []byte(strconv.FormatInt(cmd.ID, 10))
	if wc, ok := c.(windowRequestConn); ok {
		limit, _ := windowFor(c)
		return wc.PublishRequestWithin(limit, waited, command.TopicCmd, payload, command.TopicReply, corr)
	}
	if rc, ok := c.(requestConn); ok {
		pid, err = rc.PublishRequest(command.TopicCmd, payload, command.TopicReply, corr)
	} else {
		pid, err = c.Publish(command.TopicCmd, payload, 1)
	}
	return pid, err == nil, err
}

// wait queues command id on c for a place in its window.
func (cs *CommandSender) wait(c Conn, id int64) {
	cs.mu.Lock()
	cs.waiting[c] = append(cs.waiting[c], id)
	cs.mu.Unlock()
}

// record records cmd in flight on c with packet id pid.
func (cs *CommandSender) record(c Conn, pid uint16, cmd store.Command) {
	cs.mu.Lock()
	m := cs.inflight[c]
	if m == nil {
		m = map[uint16]cmdRef{}
		cs.inflight[c] = m
	}
	m[pid] = cmdRef{cmd.AppKey, cmd.DeviceName, cmd.ID}
	cs.mu.Unlock()
}

// drain sends the commands waiting on c for a place in its window, in
// order, while places are free, under the device's lock; it returns
// those it sent, to be recorded sent. Each is read again: one cancelled,
// answered or expired while it waited is given up. Its place then goes
// to the next, or back to the messages (freed).
func (cs *CommandSender) drain(ctx context.Context, c Conn, app, dev string) (sent []cmdRef, freed bool) {
	cs.mu.Lock()
	ids := slices.Clone(cs.waiting[c])
	cs.mu.Unlock()
	wc, ok := c.(windowRequestConn)
	if len(ids) == 0 || !ok {
		return nil, false
	}
	now := cs.now().UnixMilli()
	done, gaveUp := 0, 0 // ids sent or given up; given up
	for _, id := range ids {
		// Only the ones that go are read: a place frees per PUBACK, and
		// reading all the device's open commands each time cost a
		// device with a window of 1 and 100 large commands waiting
		// 100 times their bytes.
		cmd, err := cs.store.GetCommand(ctx, app, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			cs.log.Error("read a device's command", "app", app, "device", dev, "cmd_id", id, "err", err)
			break // it stays waiting, with those after it
		}
		if err != nil || !command.Deliverable(cmd, now) {
			wc.UnwaitRequest()
			done, gaveUp = done+1, gaveUp+1
			continue
		}
		pid, ok, err := cs.write(c, cmd, true)
		if err != nil || !ok {
			if err != nil {
				cs.log.Debug("publish a command", "app", app, "device", dev, "cmd_id", id, "err", err)
			}
			break // the connection ends (Detach forgets the rest), or the window is full
		}
		cs.record(c, pid, cmd)
		sent = append(sent, refOf(cmd))
		done++
	}
	cs.mu.Lock()
	// Detach, which counts the waiting ones out of active, may have
	// forgotten c meanwhile.
	if w, live := cs.waiting[c]; live {
		cs.active.Add(-int64(gaveUp))
		if done < len(w) {
			cs.waiting[c] = w[done:]
		} else {
			delete(cs.waiting, c)
		}
	}
	cs.mu.Unlock()
	return sent, gaveUp > 0 && len(sent) == 0
}

// recordSent writes that cmd was published (queued to sent), and
// reports whether it found cmd cancelled (command.SentAt): its device
// must be told.
func (cs *CommandSender) recordSent(ctx context.Context, cmd cmdRef) (cancelled bool) {
	cancelled, err := cs.svc.Sent(ctx, cmd.app, cmd.id)
	if err != nil {
		cs.log.Error("record a command sent", "app", cmd.app, "cmd_id", cmd.id, "err", err)
	}
	return cancelled
}

// Acked takes a PUBACK on c, the device's connection: when it
// acknowledges a command, the command is delivered, stored by the ack
// stage of commands (cmdacks.go) so the read loop does not wait for the
// fsync, and Acked reports true. Either way the place the PUBACK freed goes to
// the commands waiting on c, if any, before any message. It holds the
// device's lock, so a publish under way has recorded its packet id, and
// a read of Attach sees the delivery.
func (cs *CommandSender) Acked(c Conn, app, dev string, pid uint16) bool {
	if cs.active.Load() == 0 {
		return false
	}
	ctx := context.Background()
	var sent []cmdRef
	unlock := cs.lock(app, dev)
	cs.mu.Lock()
	ref, ok := cs.inflight[c][pid]
	if ok {
		delete(cs.inflight[c], pid) // the map stays until Detach, for the next command
	}
	cs.mu.Unlock()
	if ok {
		cs.active.Add(-1)
		cs.acks.add(cmdAck{ref: ref, at: cs.now().UnixMilli()})
	}
	sent, freed := cs.drain(ctx, c, app, dev)
	unlock()
	cs.recordSentOn(ctx, c, sent)
	// A place no command took goes to the messages: one a command's
	// PUBACK freed (a message's PUBACK frees its own), or given up.
	if cs.freed != nil && ((ok && len(sent) == 0) || freed) {
		cs.freed(c, app, dev)
	}
	return ok
}

// Drain sends the commands waiting on c for places in its window that
// freed without a PUBACK (Dispatcher.SetWindowFreed); the places no
// command takes go back to the messages.
func (cs *CommandSender) Drain(c Conn, app, dev string) {
	if cs.active.Load() == 0 {
		return // the flush that freed them uses them
	}
	ctx := context.Background()
	unlock := cs.lock(app, dev)
	sent, _ := cs.drain(ctx, c, app, dev)
	unlock()
	cs.recordSentOn(ctx, c, sent)
	if cs.freed != nil {
		cs.freed(c, app, dev)
	}
}

// Detach forgets connection c, which ended: what it had in flight or
// waiting is sent again, with the same cmd_id, on the device's next
// connection.
func (cs *CommandSender) Detach(c Conn) {
	cs.mu.Lock()
	cs.active.Add(-int64(len(cs.inflight[c]) + len(cs.waiting[c])))
	delete(cs.inflight, c)
	delete(cs.waiting, c)
	cs.mu.Unlock()
}

// Unsubscribe gives up the commands waiting on c for a place in its
// window: the device dropped its subscription to cmd, and the service
// sends on a topic only while the device holds one. They stay queued for
// its next subscription (Attach); what is in flight still counts, and its
// PUBACKs are taken as ever.
func (cs *CommandSender) Unsubscribe(c Conn, app, dev string) {
	defer cs.lock(app, dev)()
	cs.mu.Lock()
	ids := cs.waiting[c]
	delete(cs.waiting, c)
	cs.active.Add(-int64(len(ids)))
	cs.mu.Unlock()
	if wc, ok := c.(windowRequestConn); ok {
		for range ids {
			wc.UnwaitRequest()
		}
	}
}

// Flush stores at once the delivered states of the PUBACKs taken, which
// otherwise wait cmdAckLinger for an answer, and returns once they are
// stored: call it when the connections have ended, before the store
// closes, so that a clean stop does not leave the commands the devices
// took to be sent again.
func (cs *CommandSender) Flush() { cs.acks.flush() }

// controlConn is a Conn that counts the publishes the service owes the
// device, such as a cancel, in the device's window like its commands and
// messages (broker.Session.PublishControl).
type controlConn interface {
	PublishControl(topic string, payload []byte) error
}

// Cancel tells the device on c that command id was cancelled.
func (cs *CommandSender) Cancel(c Conn, id int64) {
	var err error
	if cc, ok := c.(controlConn); ok {
		err = cc.PublishControl(command.TopicCancel, command.CancelPayload(id))
	} else {
		_, err = c.Publish(command.TopicCancel, command.CancelPayload(id), 1)
	}
	if err != nil {
		cs.log.Debug("publish a command cancel", "cmd_id", id, "err", err)
	}
}
