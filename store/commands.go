package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// Command states (docs/api.md, "Device commands"). A command is open
// while queued, sent, delivered or in progress; every other state is
// final and never left.
const (
	CmdQueued     = "queued"
	CmdSent       = "sent"
	CmdDelivered  = "delivered"
	CmdInProgress = "in_progress"
	CmdSucceeded  = "succeeded"
	CmdFailed     = "failed"
	CmdTimedOut   = "timed_out"
	CmdExpired    = "expired"
	CmdOffline    = "offline"
	CmdRejected   = "rejected"
	CmdCancelled  = "cancelled"
)

// MaxOpenCommands is the most commands one device may have open (not
// ended) at once; a command beyond it is rejected with code
// CodeQueueFull.
const MaxOpenCommands = 100

// Codes of rejected commands, the same as in message status records.
const (
	CodeDeviceDisabled = 3003
	CodeQueueFull      = 3004
	CodeDeviceDeleted  = 3007
)

// CategoryCommand is the rate-limit category of commands: one token per
// command.
const CategoryCommand = "command"

// Command is a command sent to a device, with its state and answer.
// Times are Unix milliseconds, 0 until they happen.
type Command struct {
	ID         int64           `json:"id"`
	AppKey     string          `json:"app_key"`
	DeviceName string          `json:"device_name"`
	Name       string          `json:"name"`
	Params     json.RawMessage `json:"params,omitempty"`
	// TTL is how long (s) the command may wait to be delivered, Timeout
	// how long (s) the device has to answer once it has it.
	TTL     int64 `json:"ttl"`
	Timeout int64 `json:"timeout"`

	State    string          `json:"state"`
	Code     int             `json:"code,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Message  string          `json:"message,omitempty"`
	Answered bool            `json:"answered,omitempty"`
	Progress int             `json:"progress,omitempty"`

	TimeCreate    int64 `json:"time_create"`
	TimeSent      int64 `json:"time_sent,omitempty"`
	TimeDelivered int64 `json:"time_delivered,omitempty"`
	TimeDone      int64 `json:"time_done,omitempty"`
	// Deadline is when an answer is due (Unix ms): set at delivery and
	// moved on by each progress report.
	Deadline int64 `json:"deadline,omitempty"`

	// Job is the job the command is an attempt of (0 for none), JobIndex
	// its target's place in the job and Attempt the attempt (1 for the
	// first); see Jobs.
	Job      int64 `json:"job,omitempty"`
	JobIndex int64 `json:"job_index,omitempty"`
	Attempt  int   `json:"attempt,omitempty"`

	// Emit is never stored: events UpdateCommand's fn sets are appended
	// to the event log in the same atomic write.
	Emit []Event `json:"-"`
	// Lazy is never stored: UpdateCommand's fn sets it when the change
	// may be lost to a crash (sent: the device is sent the command again
	// with the same id), so the write need not be durable when
	// UpdateCommand returns (see Commands).
	Lazy bool `json:"-"`
}

// Open reports whether the command has not ended.
func (c Command) Open() bool { return CmdOpen(c.State) }

// CmdOpen reports whether state is one a command has not ended in.
func CmdOpen(state string) bool {
	switch state {
	case CmdQueued, CmdSent, CmdDelivered, CmdInProgress:
		return true
	}
	return false
}

// Undelivered reports whether the command waits to reach its device.
func (c Command) Undelivered() bool { return c.State == CmdQueued || c.State == CmdSent }

// CmdExpiryGrace is how long after its ttl an undelivered command is
// due, so that a PUBACK on its way still counts.
const CmdExpiryGrace = 2000

// Due is when the open command must be looked at (Unix ms): its ttl
// (plus CmdExpiryGrace) while undelivered, its answer deadline once
// delivered; 0 for an ended command. Every backend indexes open
// commands by it (DueCommands).
func (c Command) Due() int64 {
	switch {
	case c.Undelivered():
		return c.TimeCreate + c.TTL*1000 + CmdExpiryGrace
	case c.Open():
		return c.Deadline
	}
	return 0
}

// AdmitCommand applies the admission rules a store checks as it stores
// a queued command: the device must exist (else rejected, 3007) and
// have fewer than MaxOpenCommands open (else rejected, 3004). exists
// and open describe the device as the write finds it. It reports
// whether c stays queued.
func AdmitCommand(c *Command, exists bool, open int) bool {
	if c.State != CmdQueued {
		return false
	}
	switch {
	case !exists:
		c.State, c.Code, c.Message = CmdRejected, CodeDeviceDeleted, "device deleted"
	case open >= MaxOpenCommands:
		c.State, c.Code, c.Message = CmdRejected, CodeQueueFull, "device command queue full: "+strconv.Itoa(MaxOpenCommands)+" commands waiting"
	default:
		return true
	}
	c.TimeDone = c.TimeCreate
	return false
}

// ApplyCommandUpdate runs an UpdateCommand fn on c, the stored command
// id of appKey, and holds it to the contract: id, app, device and name
// stay, and an ended command never opens again. It reports whether c
// changed from open to ended.
func ApplyCommandUpdate(c *Command, id int64, appKey string, fn func(*Command) error) (ended bool, err error) {
	dev, name, wasOpen := c.DeviceName, c.Name, c.Open()
	job, index, attempt := c.Job, c.JobIndex, c.Attempt
	c.Emit, c.Lazy = nil, false
	if err := fn(c); err != nil {
		return false, err
	}
	c.ID, c.AppKey, c.DeviceName, c.Name = id, appKey, dev, name
	c.Job, c.JobIndex, c.Attempt = job, index, attempt
	if !wasOpen && c.Open() {
		return false, fmt.Errorf("update command %d: an ended command cannot open again", id)
	}
	c.Emit = Stamp(c.Emit, appKey, dev)
	return wasOpen && !c.Open(), nil
}

// CommandSeq builds the seq_no entry CreateCommands records with the
// commands, from the commands as they are stored.
type CommandSeq func(cmds []Command) *SeqEntry

// Commands is the part of the storage contract that keeps device
// commands. Every write is durable when it returns; a command is found
// by its app and id only.
type Commands interface {
	// CreateCommands stores cmds, all of one app, in one atomic write,
	// with the seq_no entry seq builds (when seq is not nil; ErrSeqUsed,
	// nothing written, if the seq_no is recorded and unexpired). Each
	// queued command passes AdmitCommand against its device as the write
	// finds it, so it may be stored rejected; commands in other states
	// are stored as they are. It returns the commands as stored. The
	// events in each command's Emit are appended in the same write.
	CreateCommands(ctx context.Context, appKey string, cmds []Command, seqNo int64, seq CommandSeq) ([]Command, error)
	// GetCommand returns the app's command id, or ErrNotFound. It may
	// return a lazy change not yet durable: a caller that passes on a
	// sent state calls Barrier first.
	GetCommand(ctx context.Context, appKey string, id int64) (Command, error)
	// UpdateCommand applies fn to the app's command id by
	// ApplyCommandUpdate and stores the result with the events fn puts
	// in Emit, atomically with respect to every other write of the
	// command, and returns it. ErrNotFound if there is no such command;
	// an error from fn is returned as is and nothing is written. When fn
	// sets Lazy, leaves the command open and emits no event, the write
	// may return before it is durable: it is durable with the next synced
	// write or Barrier, and until then a crash may take it back. fn sees
	// the command as last written, which may not be durable yet (see
	// GetCommand).
	UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*Command) error) (Command, error)
	// OpenCommands returns up to limit of the device's open commands in
	// id order.
	OpenCommands(ctx context.Context, appKey, device string, limit int) ([]Command, error)
	// DueCommands returns up to limit open commands whose Due is at or
	// before the Unix ms before, earliest first.
	DueCommands(ctx context.Context, before int64, limit int) ([]Command, error)
	// LastCommandID returns the highest command id stored, 0 if none.
	LastCommandID(ctx context.Context) (int64, error)
}
