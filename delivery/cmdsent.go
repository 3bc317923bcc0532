package delivery

import (
	"context"
	"errors"
	"sync"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// Addressed is a command and the connection of its device.
type Addressed struct {
	Conn    Conn
	Command store.Command
}

// SendAll is Send for each of cmds, in order, with the sent states of
// those it published recorded in one store write where the store can
// (store.CommandBatcher): POST /cmd/v1/cmds made a write per command,
// one after the other, a thousand per call. A command that write finds
// cancelled (command.SentAt) gets its cmd/cancel on its connection.
func (cs *CommandSender) SendAll(ctx context.Context, cmds []Addressed) {
	sent := make([]cmdRef, 0, len(cmds))
	for _, a := range cmds {
		unlock := cs.lock(a.Command.AppKey, a.Command.DeviceName)
		if cs.publish(a.Conn, a.Command) {
			sent = append(sent, refOf(a.Command))
		}
		unlock()
	}
	cancelled := cs.recordSentAll(ctx, sent)
	for _, a := range cmds {
		if len(cancelled) == 0 {
			break
		}
		if cancelled[a.Command.ID] {
			delete(cancelled, a.Command.ID)
			cs.Cancel(a.Conn, a.Command.ID)
		}
	}
}

// recordSentOn is recordSentAll for commands published on c, and tells
// the device of those cancelled before the write, in the order they
// were sent.
func (cs *CommandSender) recordSentOn(ctx context.Context, c Conn, cmds []cmdRef) {
	cancelled := cs.recordSentAll(ctx, cmds)
	for _, cmd := range cmds {
		if cancelled[cmd.id] {
			cs.Cancel(c, cmd.id)
		}
	}
}

// commandBatcher is the store's store.CommandBatcher, when it offers it.
type commandBatcher interface {
	UpdateCommands(ctx context.Context, updates []store.CommandUpdate) ([]store.Command, []error, error)
}

// recordSentAll writes that cmds were published, in one write where the
// store can, else one by one (recordSent). It returns the ids of those it
// found cancelled (command.SentAt): their devices must be told.
func (cs *CommandSender) recordSentAll(ctx context.Context, cmds []cmdRef) (cancelled map[int64]bool) {
	b, ok := cs.store.(commandBatcher)
	if !ok || len(cmds) < 2 {
		for _, cmd := range cmds {
			if cs.recordSent(ctx, cmd) {
				cancelled = addID(cancelled, cmd.id)
			}
		}
		return cancelled
	}
	var mu sync.Mutex
	sentAt := command.SentAt(cs.now().UnixMilli())
	fn := func(c *store.Command) error {
		if c.State == store.CmdCancelled {
			mu.Lock()
			cancelled = addID(cancelled, c.ID)
			mu.Unlock()
		}
		return sentAt(c)
	}
	updates := make([]store.CommandUpdate, len(cmds))
	for i, cmd := range cmds {
		updates[i] = store.CommandUpdate{AppKey: cmd.app, ID: cmd.id, Fn: fn}
	}
	_, errs, err := b.UpdateCommands(ctx, updates)
	if errors.Is(err, errors.ErrUnsupported) {
		cancelled = nil
		for _, cmd := range cmds {
			if cs.recordSent(ctx, cmd) {
				cancelled = addID(cancelled, cmd.id)
			}
		}
		return cancelled
	}
	if err != nil {
		cs.log.Error("record commands sent", "commands", len(cmds), "err", err)
		return cancelled // read as cancelled all the same
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, command.ErrUnchanged) && !errors.Is(err, store.ErrNotFound) {
			cs.log.Error("record a command sent", "app", cmds[i].app, "cmd_id", cmds[i].id, "err", err)
		}
	}
	return cancelled
}

// addID adds id to the set m, made when nil.
func addID(m map[int64]bool, id int64) map[int64]bool {
	if m == nil {
		m = map[int64]bool{}
	}
	m[id] = true
	return m
}
