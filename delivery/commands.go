package delivery

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// CommandStore is what the CommandSender reads: a device's open
// commands, and Barrier before it hands the device what it read.
type CommandStore interface {
	OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error)
	Barrier(ctx context.Context) error
}

var _ CommandStore = store.Store(nil)

// requestConn is a Conn that can publish a request with MQTT 5's Response
// Topic and Correlation Data (broker.Session).
type requestConn interface {
	PublishRequest(topic string, payload []byte, responseTopic string, correlation []byte) (uint16, error)
}

// CommandSender puts commands on device connections, apart from the
// message queue and its window: a backlog of messages never delays a
// command. It keeps only the commands awaiting their PUBACK, per
// connection, so a device that never gets a command costs nothing here.
type CommandSender struct {
	store CommandStore
	svc   *command.Service
	log   *slog.Logger
	now   func() time.Time

	mu       sync.Mutex
	inflight map[Conn]map[uint16]cmdRef
	// active counts the commands being published or awaiting their
	// PUBACK: while it is 0, a PUBACK is a message's, found at once.
	active atomic.Int64

	// locks order the sends to one device (accepted order).
	locks [64]sync.Mutex
}

type cmdRef struct {
	app, dev string
	id       int64
}

// NewCommandSender returns a CommandSender recording sends and PUBACKs
// with svc.
func NewCommandSender(st CommandStore, svc *command.Service, log *slog.Logger) *CommandSender {
	return &CommandSender{store: st, svc: svc, log: log, now: time.Now, inflight: map[Conn]map[uint16]cmdRef{}}
}

func (cs *CommandSender) lock(app, dev string) func() {
	h := uint32(2166136261)
	for _, s := range [2]string{app, dev} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
		h *= 16777619
	}
	m := &cs.locks[h%uint32(len(cs.locks))]
	m.Lock()
	return m.Unlock
}

// Attach sends the device's commands that wait for it on connection c,
// in accepted order: all undelivered ones for a new subscription
// (resent ones carry the same cmd_id), only the queued ones when queued
// is set (another node said a command was queued). The device's sends,
// PUBACKs and this read are serialised, so what it reads is not
// overtaken by a send or PUBACK of the same command.
func (cs *CommandSender) Attach(ctx context.Context, c Conn, app, dev string, queued bool) {
	var sent []store.Command
	defer func() {
		for _, cmd := range sent {
			cs.recordSent(ctx, cmd)
		}
	}()
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
	for _, cmd := range open {
		if queued && cmd.State != store.CmdQueued {
			continue
		}
		if cs.publish(c, cmd) {
			sent = append(sent, cmd)
		}
	}
}

// Send publishes cmd, which is durable, on c unless it is in flight on c
// already or can no longer be delivered, and records it sent.
func (cs *CommandSender) Send(ctx context.Context, c Conn, cmd store.Command) {
	unlock := cs.lock(cmd.AppKey, cmd.DeviceName)
	sent := cs.publish(c, cmd)
	unlock()
	if sent {
		cs.recordSent(ctx, cmd)
	}
}

// publish puts cmd on c and records its packet id, under the device's
// lock; it reports whether it did. The sent state is written after the
// lock is released (recordSent), so the PUBACK's delivered write need
// not wait for it: either order ends delivered.
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
	cs.mu.Unlock()
	cs.active.Add(1)
	payload := command.Payload(cmd)
	var pid uint16
	var err error
	if rc, ok := c.(requestConn); ok {
		pid, err = rc.PublishRequest(command.TopicCmd, payload, command.TopicReply, []byte(strconv.FormatInt(cmd.ID, 10)))
	} else {
		pid, err = c.Publish(command.TopicCmd, payload, 1)
	}
	if err != nil {
		cs.active.Add(-1)
		cs.log.Debug("publish a command", "app", cmd.AppKey, "device", cmd.DeviceName, "cmd_id", cmd.ID, "err", err)
		return false
	}
	cs.mu.Lock()
	m := cs.inflight[c]
	if m == nil {
		m = map[uint16]cmdRef{}
		cs.inflight[c] = m
	}
	m[pid] = cmdRef{cmd.AppKey, cmd.DeviceName, cmd.ID}
	cs.mu.Unlock()
	return true
}

// recordSent writes that cmd was published (queued to sent).
func (cs *CommandSender) recordSent(ctx context.Context, cmd store.Command) {
	if err := cs.svc.Sent(ctx, cmd.AppKey, cmd.ID); err != nil {
		cs.log.Error("record a command sent", "app", cmd.AppKey, "cmd_id", cmd.ID, "err", err)
	}
}

// Acked takes a PUBACK on c, the device's connection: when it
// acknowledges a command, the command is delivered once that is stored,
// and Acked reports true. It holds the device's lock, so a publish under
// way has recorded its packet id, and a read of Attach sees the delivery.
func (cs *CommandSender) Acked(c Conn, app, dev string, pid uint16) bool {
	if cs.active.Load() == 0 {
		return false
	}
	defer cs.lock(app, dev)()
	cs.mu.Lock()
	ref, ok := cs.inflight[c][pid]
	if ok {
		delete(cs.inflight[c], pid)
		if len(cs.inflight[c]) == 0 {
			delete(cs.inflight, c)
		}
	}
	cs.mu.Unlock()
	if !ok {
		return false
	}
	cs.active.Add(-1)
	if err := cs.svc.Delivered(context.Background(), ref.app, ref.dev, ref.id); err != nil {
		cs.log.Error("record a command delivered", "app", ref.app, "cmd_id", ref.id, "err", err)
	}
	return true
}

// Detach forgets connection c, which ended: what it had in flight is
// sent again, with the same cmd_id, on the device's next connection.
func (cs *CommandSender) Detach(c Conn) {
	cs.mu.Lock()
	cs.active.Add(-int64(len(cs.inflight[c])))
	delete(cs.inflight, c)
	cs.mu.Unlock()
}

// Cancel tells the device on c that command id was cancelled.
func (cs *CommandSender) Cancel(c Conn, id int64) {
	if _, err := c.Publish(command.TopicCancel, command.CancelPayload(id), 1); err != nil {
		cs.log.Debug("publish a command cancel", "cmd_id", id, "err", err)
	}
}
