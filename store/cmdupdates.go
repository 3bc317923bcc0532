package store

import "context"

// CommandUpdate is one update of CommandBatcher.UpdateCommands: Fn is
// applied to the app's command ID as Commands.UpdateCommand applies its
// fn.
type CommandUpdate struct {
	AppKey string
	ID     int64
	Fn     func(*Command) error
}

// CommandBatcher is what a backend that can store many command updates in
// one write offers beside Commands (the embedded store: one batch, one
// fsync). A caller that finds a Store without it makes the updates one by
// one with UpdateCommand.
type CommandBatcher interface {
	// UpdateCommands applies each update as UpdateCommand does and
	// stores the results in one atomic write, in order, each to the
	// result of the one before for the same command. It returns, per
	// update, the command as stored or the update's error (ErrNotFound,
	// or fn's error, which leaves that command unchanged); the last error
	// kept every update from being tried. The write is durable when the
	// call returns unless every update that changed a command set Lazy,
	// left it open and emitted no event (UpdateCommand's lazy write).
	// visible, when not nil, is called once: as soon as the write is
	// visible to reads, before the call waits for its fsync, or when the
	// call writes nothing.
	UpdateCommands(ctx context.Context, updates []CommandUpdate, visible func()) ([]Command, []error, error)
}
