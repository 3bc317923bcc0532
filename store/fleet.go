package store

import (
	"context"
	"encoding/json"
)

// Fleet is the part of the Store contract that addresses many devices at
// once (docs/api.md, "Tags", "Send to many devices" and "Broadcast"): the
// tag index, batch sends and broadcasts.
type Fleet interface {
	// ListTagged returns up to limit of the app's devices that carry tag,
	// in name order, starting after the name cursor ("" for the start).
	// It reads the app's tag index, written atomically with every device
	// write, so its cost grows with the devices it returns, not with the
	// app's devices.
	ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (DevicePage, error)

	// EnabledNames returns the names of the app's enabled devices that
	// carry tag, or of all of them with tag "", in name order: the
	// targets of a broadcast accepted now.
	EnabledNames(ctx context.Context, appKey, tag string) ([]string, error)

	// GetDevices returns the app's devices of names that exist, in the
	// order of names, in one read where the backend can (a fan-out
	// chunk's devices).
	GetDevices(ctx context.Context, appKey string, names []string) ([]Device, error)

	// CreateMessages stores messages of one app in one atomic, durable
	// write (all or none on a storage failure), recording seq (when not
	// nil) and applying step (when not nil) in the same write. Each
	// message is stored as CreateMessage would, except that a pending one
	// whose device's queue is full is stored as its Full, and one whose
	// device does not exist is not stored. The result has each message's
	// outcome: BatchStored, BatchFull or BatchGone. A write with a step
	// (and no seq) may return before it is durable: steps are atomic and
	// durable in the order they are made, so a crash takes back at most
	// the last steps whole, and the fan-out redoes them from the cursor
	// that survived; Barrier makes them durable before what they hold
	// leaves the process. It fails with
	// ErrSeqUsed as CreateMessage does, and with ErrVersionConflict when
	// step's broadcast is not fanning out at step.Chunk (nothing
	// written either way).
	CreateMessages(ctx context.Context, appKey string, msgs []BatchMessage, seq *BatchSeq, step *BroadcastStep) ([]int, error)

	// CreateBroadcast stores a new broadcast with its targets, the names
	// of the devices it reaches as taken when it is accepted, in chunks
	// (targets[i] is chunk i; b.Chunks must be len(targets)), recording
	// seq (when not nil), all in one durable write; ErrSeqUsed as
	// CreateMessage, ErrAlreadyExists for a broadcast id in use.
	CreateBroadcast(ctx context.Context, b Broadcast, targets [][]string, seqNo int64, seq *SeqEntry) error
	// BroadcastTargets returns chunk n of the app's broadcast's targets;
	// ErrNotFound once the chunk's step is written (each step deletes its
	// chunk), after the broadcast stopped fanning out, or if there is
	// none such.
	BroadcastTargets(ctx context.Context, appKey string, id int64, n int) ([]string, error)
	// GetBroadcast returns the app's broadcast or ErrNotFound.
	GetBroadcast(ctx context.Context, appKey string, id int64) (Broadcast, error)
	// CountBroadcast counts by state the app's messages of broadcast id
	// whose msgids are first to last (its FirstID and LastID): the
	// numbers its progress shows. It reads only what counting needs,
	// where the backend can.
	CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (BroadcastCounts, error)
	// UpdateBroadcast applies fn to the app's broadcast and stores the
	// result atomically with respect to every other write of it (steps
	// included), and returns it; a result no longer fanning out has its
	// chunks of targets not yet stepped deleted in the same write. fn
	// must not change ID, AppKey, Chunks or Chunk.
	// ErrNotFound if absent; an error from fn comes back as is.
	UpdateBroadcast(ctx context.Context, appKey string, id int64, fn func(*Broadcast) error) (Broadcast, error)
	// ActiveBroadcasts returns the broadcasts of every app that are
	// Active, oldest first, so a node that takes over the fan-out finds
	// them.
	ActiveBroadcasts(ctx context.Context) ([]Broadcast, error)
}

// BroadcastCounts are a broadcast's messages by state.
type BroadcastCounts struct {
	Delivered, Expired, Failed, Retracted, Pending int64
}

// Add counts one message in state.
func (c *BroadcastCounts) Add(state string) {
	switch state {
	case StateDelivered:
		c.Delivered++
	case StateExpired:
		c.Expired++
	case StateFailed:
		c.Failed++
	case StateRetracted:
		c.Retracted++
	default:
		c.Pending++
	}
}

// CountByListing is CountBroadcast for a backend with nothing better than
// ListMessages: it pages through the app's messages from last down to
// first.
func CountByListing(ctx context.Context, list func(ctx context.Context, appKey string, before int64, limit int) ([]Message, error), appKey string, id, first, last int64) (BroadcastCounts, error) {
	var c BroadcastCounts
	if last == 0 {
		return c, nil
	}
	const page = 500
	for before := last + 1; ; {
		ms, err := list(ctx, appKey, before, page)
		if err != nil {
			return c, err
		}
		for _, m := range ms {
			if m.ID < first {
				return c, nil
			}
			if m.Broadcast == id {
				c.Add(m.State)
			}
		}
		if len(ms) < page {
			return c, nil
		}
		before = ms[len(ms)-1].ID
	}
}

// BatchMessage is one message of CreateMessages with what to store and
// answer for each outcome.
type BatchMessage struct {
	// Message is stored as it is, queued when pending.
	Message Message
	// Full is stored instead of a pending Message whose device's queue
	// holds MaxPending messages: the same message, not pending, with the
	// records that say why (its ID, app and device are Message's).
	Full Message
	// Answers are this message's parts of the seq_no entry's body for
	// each outcome, indexed by BatchStored, BatchFull and BatchGone.
	Answers [3][]byte
}

// Outcomes of one BatchMessage, the indexes of its Answers.
const (
	BatchStored = 0 // Message stored
	BatchFull   = 1 // Full stored: the device's queue was full
	BatchGone   = 2 // nothing stored: the device does not exist
)

// BatchSeq is the seq_no entry CreateMessages records: Entry with a Body
// of Prefix, the Answers of every message's outcome joined by commas, and
// Suffix.
type BatchSeq struct {
	SeqNo  int64
	Entry  SeqEntry // its Body is ignored
	Prefix []byte
	Suffix []byte
	// Epoch is the store's flag epoch taken before the messages' devices
	// were read and found (EpochOK false when it could not tell), as
	// BroadcastStep's: a store whose flag epoch is still Epoch while it
	// holds the devices' locks may take each device to exist without
	// reading it again.
	Epoch   uint64
	EpochOK bool
}

// Body returns the entry's body for the outcomes of msgs.
func (q *BatchSeq) Body(msgs []BatchMessage, outcomes []int) []byte {
	n := len(q.Prefix) + len(msgs) + len(q.Suffix)
	for i, m := range msgs {
		n += len(m.Answers[outcomes[i]])
	}
	b := append(make([]byte, 0, n), q.Prefix...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.Answers[outcomes[i]]...)
	}
	return append(b, q.Suffix...)
}

// Broadcast states: fanning out until every target has its message
// (done) or it is cancelled (docs/api.md, "Broadcast").
const (
	BroadcastFanningOut = "fanning_out"
	BroadcastDone       = "done"
	BroadcastCancelled  = "cancelled"
)

// Broadcast is one broadcast: what to send to which devices, and how far
// its fan-out has come.
type Broadcast struct {
	ID     int64  `json:"id"`
	AppKey string `json:"app_key"`
	// Tag selects the devices carrying it; "" with All every device.
	Tag         string          `json:"tag,omitempty"`
	All         bool            `json:"all,omitempty"`
	Body        string          `json:"body"`
	TTL         int64           `json:"ttl"`
	CallbackURL string          `json:"callback_url,omitempty"`
	Params      json.RawMessage `json:"params,omitempty"`
	TimeCreate  int64           `json:"time_create"` // Unix seconds
	// Targets is how many enabled devices matched when it was accepted:
	// the names stored with it (CreateBroadcast) in Chunks chunks.
	Targets int64 `json:"targets"`
	Chunks  int   `json:"chunks"`

	State string `json:"state"`
	// Chunk is the next chunk of targets the fan-out reaches (0 at the
	// start): every target of the chunks before it has its message (or
	// was skipped) and none after it has.
	Chunk int `json:"chunk"`
	// Queued counts the messages made so far.
	Queued int64 `json:"queued"`
	// FirstID and LastID bound the msgids of its messages (0 before the
	// first).
	FirstID int64 `json:"first_id"`
	LastID  int64 `json:"last_id"`
	// Swept says a cancelled broadcast's undelivered messages are all
	// retracted.
	Swept bool `json:"swept,omitempty"`
}

// Active reports whether the broadcast still has work: fanning out, or
// cancelled and not yet swept.
func (b Broadcast) Active() bool {
	return b.State == BroadcastFanningOut || b.State == BroadcastCancelled && !b.Swept
}

// BroadcastStep is the progress one chunk of targets makes, written with
// the chunk's messages: the broadcast's Chunk moves from Chunk to
// Chunk+1 and the chunk's targets are deleted, Queued grows by the
// messages stored and FirstID/LastID take in their ids; Done ends the
// fan-out (state done).
type BroadcastStep struct {
	AppKey string
	ID     int64
	Chunk  int
	Done   bool
	// Epoch is the store's flag epoch taken before the chunk's devices
	// were read and found (EpochOK false when it could not tell). A store
	// whose flag epoch is still Epoch while it holds the devices' locks
	// knows none of them was deleted since, and may take each message's
	// device to exist without reading it again.
	//
	// A flag epoch is no part of the contract: a backend whose devices
	// only its own process changes (Pebble, memory) may offer one as a
	// method FlagEpoch() (epoch uint64, ok bool), a number that changes
	// whenever any device's flag changes or any device is deleted, the
	// change visible there before a write that would see the new flag or
	// the deletion can run. Callers look for it with a type assertion;
	// without it (Redis, whose devices other nodes change) EpochOK is
	// false and devices are read again.
	Epoch   uint64
	EpochOK bool
	// Prepared is what the store's optional PrepareStep method returned
	// for the same messages, ahead of the write, or nil. PrepareStep(ctx,
	// appKey, msgs, connected) (any, error) is no part of the contract: a
	// backend (Pebble) may offer it to do ahead whatever of a step's
	// CreateMessages needs no lock, locking and writing nothing, so that
	// a step written with it stores what one written without it would
	// (connected[i] says msgs[i]'s device was connected; nil: all were).
	// A store ignores a Prepared it did not make for these messages.
	Prepared any
}
