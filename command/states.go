package command

import (
	"fmt"

	"github.com/devmsg/devmsg/store"
)

// ErrUnchanged is what the fn of SentAt returns when it leaves the
// command as it is: nothing is written.
var ErrUnchanged = errUnchanged

// ErrCancelledUnsent is the ErrUnchanged of SentAt for a command found
// cancelled: its device, which was sent it, must get cmd/cancel.
var ErrCancelledUnsent = fmt.Errorf("%w: cancelled before it was recorded sent", errUnchanged)

// SentAt returns the UpdateCommand fn that records a queued command
// published at the Unix ms at: the write Sent makes, for a caller that
// writes many commands' at once (store.CommandBatcher). It is lazy, as
// Sent's.
//
// A command is published first and recorded sent after, so the write can
// find it cancelled: a cancel that read it queued in between ended it
// and told no device. The fn then returns ErrCancelledUnsent, and the
// publisher sends the device cmd/cancel itself, after the command.
func SentAt(at int64) func(*store.Command) error {
	return func(c *store.Command) error {
		if c.State == store.CmdCancelled {
			return ErrCancelledUnsent
		}
		if c.State != store.CmdQueued {
			return ErrUnchanged
		}
		c.State, c.TimeSent = store.CmdSent, at
		c.Lazy = true // a crash before the next synced write sends it again
		return nil
	}
}

// BatchRouter is a Router that also takes the queued commands of one
// send together, so that it can record them sent in one write.
type BatchRouter interface {
	Router
	// NotifyCommands is NotifyCommand for each of cmds, devs[i] the
	// device of cmds[i] as read before.
	NotifyCommands(cmds []store.Command, devs []store.Device)
}

// DeliveredAt returns the UpdateCommand fn that records the PUBACK, at
// the Unix ms at, of a command published to device: the write Delivered
// makes, for a caller that writes many commands' at once. Its answer is
// due within its timeout from at. The write is synced, not lazy as
// Sent's: a delivered state lost to a crash would leave the command
// undelivered, to end expired once its ttl (0 by default) has passed
// although the device has it and will answer.
func DeliveredAt(device string, at int64) func(*store.Command) error {
	return func(c *store.Command) error {
		if c.DeviceName != device || !c.Undelivered() {
			return ErrUnchanged
		}
		if c.TimeSent == 0 {
			c.TimeSent = at
		}
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, at, at+c.Timeout*1000
		return nil
	}
}
