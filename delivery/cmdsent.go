package delivery

import (
	"context"
	"errors"

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
	on := make([]Conn, 0, len(cmds))
	for _, a := range cmds {
		unlock := cs.lock(a.Command.AppKey, a.Command.DeviceName)
		if cs.publish(a.Conn, a.Command) {
			sent = append(sent, refOf(a.Command))
			on = append(on, a.Conn)
		}
		unlock()
	}
	for _, i := range cs.recordSentAll(ctx, sent) {
		cs.Cancel(on[i], sent[i].id)
	}
}

// recordSentOn is recordSentAll for commands published on c, and tells
// the device of those cancelled before the write.
func (cs *CommandSender) recordSentOn(ctx context.Context, c Conn, cmds []cmdRef) {
	for _, i := range cs.recordSentAll(ctx, cmds) {
		cs.Cancel(c, cmds[i].id)
	}
}

// recordSentAll writes that cmds were published, in one write where the
// store can, else one by one (recordSent). It returns, in order, the
// indexes in cmds of those it found cancelled (command.SentAt): their
// devices must be told.
func (cs *CommandSender) recordSentAll(ctx context.Context, cmds []cmdRef) (cancelled []int) {
	b, ok := cs.store.(store.CommandBatcher)
	if ok && len(cmds) > 1 {
		fn := command.SentAt(cs.now().UnixMilli())
		updates := make([]store.CommandUpdate, len(cmds))
		for i, cmd := range cmds {
			updates[i] = store.CommandUpdate{AppKey: cmd.app, ID: cmd.id, Fn: fn}
		}
		_, errs, err := b.UpdateCommands(ctx, updates, nil)
		if !errors.Is(err, errors.ErrUnsupported) {
			if err != nil {
				cs.log.Error("record commands sent", "commands", len(cmds), "err", err)
				return nil
			}
			for i, err := range errs {
				switch {
				case errors.Is(err, command.ErrCancelledUnsent):
					cancelled = append(cancelled, i)
				case err != nil && !errors.Is(err, command.ErrUnchanged) && !errors.Is(err, store.ErrNotFound):
					cs.log.Error("record a command sent", "app", cmds[i].app, "cmd_id", cmds[i].id, "err", err)
				}
			}
			return cancelled
		}
	}
	for i, cmd := range cmds {
		if cs.recordSent(ctx, cmd) {
			cancelled = append(cancelled, i)
		}
	}
	return cancelled
}
