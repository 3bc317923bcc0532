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
// one after the other, a thousand per call.
func (cs *CommandSender) SendAll(ctx context.Context, cmds []Addressed) {
	sent := make([]cmdRef, 0, len(cmds))
	for _, a := range cmds {
		unlock := cs.lock(a.Command.AppKey, a.Command.DeviceName)
		if cs.publish(a.Conn, a.Command) {
			sent = append(sent, refOf(a.Command))
		}
		unlock()
	}
	cs.recordSentAll(ctx, sent)
}

// commandBatcher is the store's store.CommandBatcher, when it offers it.
type commandBatcher interface {
	UpdateCommands(ctx context.Context, updates []store.CommandUpdate) ([]store.Command, []error, error)
}

// recordSentAll writes that cmds were published, in one write where the
// store can, else one by one (recordSent).
func (cs *CommandSender) recordSentAll(ctx context.Context, cmds []cmdRef) {
	b, ok := cs.store.(commandBatcher)
	if !ok || len(cmds) < 2 {
		for _, cmd := range cmds {
			cs.recordSent(ctx, cmd)
		}
		return
	}
	fn := command.SentAt(cs.now().UnixMilli())
	updates := make([]store.CommandUpdate, len(cmds))
	for i, cmd := range cmds {
		updates[i] = store.CommandUpdate{AppKey: cmd.app, ID: cmd.id, Fn: fn}
	}
	_, errs, err := b.UpdateCommands(ctx, updates)
	if errors.Is(err, errors.ErrUnsupported) {
		for _, cmd := range cmds {
			cs.recordSent(ctx, cmd)
		}
		return
	}
	if err != nil {
		cs.log.Error("record commands sent", "commands", len(cmds), "err", err)
		return
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, command.ErrUnchanged) && !errors.Is(err, store.ErrNotFound) {
			cs.log.Error("record a command sent", "app", cmds[i].app, "cmd_id", cmds[i].id, "err", err)
		}
	}
}
