package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// MaxBatch is the most devices one batch send names (docs/api.md, "Send
// to many devices").
const MaxBatch = 1000

// Result codes of a batch send's elements besides 0 and the record error
// codes ErrCodeDeviceDisabled and ErrCodeQueueFull: those a single send
// answers for the same name (docs/api.md, "Errors"), an empty device_name
// being missing and an unknown one invalid.
const (
	CodeMissingDevice = 1002
	CodeInvalidDevice = 1003
)

// BatchResult is one device's result of a batch send, in the shape of
// the answer's resp[] element.
type BatchResult struct {
	DeviceName string `json:"device_name"`
	Code       int    `json:"code"`
	MsgID      int64  `json:"msgid,omitempty"`
	Message    string `json:"message,omitempty"`
}

// BatchStore is what batch sends and broadcasts need of the store
// besides Store.
type BatchStore interface {
	CreateMessages(ctx context.Context, appKey string, msgs []store.BatchMessage, seq *store.BatchSeq, step *store.BroadcastStep) ([]int, error)
}

// BatchSend is a validated batch send: the device names in request
// order and the message.
type BatchSend struct {
	Devices []string
	SendRequest
}

// BatchPlan is a batch send resolved against the store: which names get
// a message, and the results of those that do not. Make one with Plan,
// then Commit it.
type BatchPlan struct {
	app     store.App
	results []BatchResult
	msgs    []store.BatchMessage
	index   []int // msgs[j] answers results[index[j]]
	devs    []store.Device
	// flags is the store's FlagEpoch from before devs were read; see
	// Commit.
	flags flagMark
}

// flagEpocher is a store that tells when no device's flag changed: an
// optional method outside the store.Store contract (Pebble and memory
// have it; see store.BroadcastStep's Epoch). FlagEpoch returns a number
// that changes whenever any device's flag changes or any device is
// deleted, the change visible before a write that would see the new flag
// or the deletion can run, and ok false where the store cannot tell. A
// store without it is read as one that cannot tell (Redis, whose devices
// other nodes change): its devices are read again.
type flagEpocher interface {
	FlagEpoch() (epoch uint64, ok bool)
}

// flagEpochOf returns st's FlagEpoch, or ok false when st is no
// flagEpocher.
func flagEpochOf(st any) (epoch uint64, ok bool) {
	if fe, ok := st.(flagEpocher); ok {
		return fe.FlagEpoch()
	}
	return 0, false
}

// flagMark is a store's FlagEpoch taken before devices were read (ok
// false: the store cannot tell).
type flagMark struct {
	epoch uint64
	ok    bool
}

// heldBy reports whether st's FlagEpoch is still m: no device's flag
// changed and none was deleted since m was taken, so devices read after
// it still hold. A store that is no flagEpocher never holds.
func (m flagMark) heldBy(st any) bool {
	fe, ok := st.(flagEpocher)
	if !ok || !m.ok {
		return false
	}
	e, ok := fe.FlagEpoch()
	return ok && e == m.epoch
}

// Messages is how many messages the plan stores, each taking a message
// token from the app's rate limit.
func (p *BatchPlan) Messages() int { return len(p.msgs) }

// Plan reads the named devices and builds one ordinary message for each
// known name, in request order (docs/api.md, "Send to many devices"): 1002 for an empty
// name (each of them: a single send answers "" with 1002, device_name
// missing), 1003 for an unknown name or one repeated (every repeat after
// the first), failed with record
// 1 (code 3003) for a disabled device, failed with record 5 for ttl 0
// and an offline device; pending otherwise, with the queue-full form
// (record 3, code 3004) the store falls back to.
func (s *Service) Plan(ctx context.Context, app store.App, req BatchSend) (*BatchPlan, error) {
	now := s.now()
	n := len(req.Devices)
	p := &BatchPlan{
		app:     app,
		results: make([]BatchResult, n),
		msgs:    make([]store.BatchMessage, 0, n),
		index:   make([]int, 0, n),
		devs:    make([]store.Device, 0, n),
	}
	if fe, ok := s.store.(flagEpocher); ok {
		p.flags.epoch, p.flags.ok = fe.FlagEpoch()
	}
	seen := make(map[string]bool, len(req.Devices))
	for i, name := range req.Devices {
		r := &p.results[i]
		r.DeviceName = name
		if name == "" {
			r.Code, r.Message = CodeMissingDevice, fmt.Sprintf("device_names[%d] is required", i)
			continue
		}
		if seen[name] {
			r.Code, r.Message = CodeInvalidDevice, fmt.Sprintf("device_names[%d]: device %q appears more than once", i, name)
			continue
		}
		seen[name] = true
		dev, err := s.store.GetDevice(ctx, app.Key, name)
		if errors.Is(err, store.ErrNotFound) {
			r.Code, r.Message = CodeInvalidDevice, errdefs.NotFound("device", name).Error()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("batch send: load device %q: %w", name, err)
		}
		p.msgs = append(p.msgs, s.batchMessage(app, dev, req.SendRequest, now))
		p.index = append(p.index, i)
		p.devs = append(p.devs, dev)
	}
	return p, nil
}

// newMessage builds dev's message of a batch send or broadcast as Send
// would store it, with its queue-full form. The records of a pending
// message and of its queue-full form are one allocation, not three (a
// tenth of a batch send's allocations): each form has its own part of
// it, capped, so neither can grow into the other.
func (s *Service) newMessage(appKey string, dev store.Device, req SendRequest, now time.Time) store.BatchMessage {
	m := store.Message{
		ID:          s.ids.Next(),
		AppKey:      appKey,
		DeviceName:  dev.Name,
		Body:        req.Body,
		TTL:         req.TTL,
		TimeCreate:  now.Unix(),
		ExpireTime:  now.Unix() + req.TTL,
		CallbackURL: req.CallbackURL,
		Params:      req.Params,
	}
	recs := new(batchRecords)
	switch {
	case dev.Flag == store.FlagDisabled:
		m.State = store.StateFailed
		m.Records = []store.Record{NewRecord(m, store.RecordTargetInvalid, ErrCodeDeviceDisabled, "device disabled", now)}
	case req.TTL == 0 && !s.router.Online(dev):
		m.State = store.StateFailed
		m.Records = []store.Record{
			NewRecord(m, store.RecordTargetValid, 0, "", now),
			NewRecord(m, store.RecordSubmitSuccess, 0, "", now),
			NewRecord(m, store.RecordDeliveryFailure, ErrCodeDeviceOffline, "device offline and ttl is 0", now),
		}
	default:
		m.State = store.StatePending
		recs.all[0] = NewRecord(m, store.RecordTargetValid, 0, "", now)
		recs.all[1] = NewRecord(m, store.RecordSubmitSuccess, 0, "", now)
		m.Records = recs.all[0:2:2]
	}
	full := m
	full.State = store.StateFailed
	recs.all[2] = NewRecord(m, store.RecordTargetValid, 0, "", now)
	recs.all[3] = store.Record{Type: store.RecordSubmitFailure, SentTime: now.Unix(), Error: &recs.fullErr}
	recs.fullErr = store.RecordError{Code: ErrCodeQueueFull, Message: queueFullMessage}
	full.Records = recs.all[2:4:4]
	return store.BatchMessage{Message: m, Full: full}
}

// batchRecords holds the records of a batch message's pending form
// (all[0:2]) and queue-full form (all[2:4]), and the latter's error.
type batchRecords struct {
	all     [4]store.Record
	fullErr store.RecordError
}

// queueFullMessage is the record message of a message refused for a full
// queue, made once: every message of a batch or broadcast carries it in
// its queue-full form.
var queueFullMessage = "device queue full: " + strconv.Itoa(store.MaxPending) + " messages pending"

// queueFullAnswer ends the message of a batch send's queue-full answer.
var queueFullAnswer = " queue full: " + strconv.Itoa(store.MaxPending) + " messages pending"

// batchMessage is newMessage with the answers of a batch send.
func (s *Service) batchMessage(app store.App, dev store.Device, req SendRequest, now time.Time) store.BatchMessage {
	bm := s.newMessage(app.Key, dev, req, now)
	ok := BatchResult{DeviceName: dev.Name, MsgID: bm.Message.ID}
	if dev.Flag == store.FlagDisabled {
		ok.Code, ok.Message = ErrCodeDeviceDisabled, "device "+strconv.Quote(dev.Name)+" is disabled"
	}
	// The three answers share one allocation (about 240 bytes and the
	// name five times).
	b := make([]byte, 0, 5*len(dev.Name)+260)
	var n1, n2 int
	if ok.Code == 0 && plainJSON(dev.Name) {
		b, n1, n2 = appendPlainAnswers(b, dev.Name, bm.Message.ID)
	} else {
		b = appendBatchResult(b, ok)
		n1 = len(b)
		b = appendDeviceResult(b, dev.Name, ErrCodeQueueFull, bm.Message.ID, queueFullAnswer)
		n2 = len(b)
		b = appendDeviceResult(b, dev.Name, CodeInvalidDevice, 0, " not found") // as errdefs.NotFound("device", dev.Name)
	}
	bm.Answers[store.BatchStored] = b[:n1:n1]
	bm.Answers[store.BatchFull] = b[n1:n2:n2]
	bm.Answers[store.BatchGone] = b[n2:]
	return bm
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err))
	}
	return b
}

// Commit stores the plan's messages in one durable write, recording the
// seq_no entry (when entry is not nil; its Body becomes the answer) in
// the same write, and returns the answer's body, {"resp":[...]} with the
// results in request order. Queued messages are handed to the router.
// Errors are the store's (store.ErrSeqUsed when the seq_no was recorded
// meanwhile). A plan is committed once.
func (s *Service) Commit(ctx context.Context, p *BatchPlan, seqNo int64, entry *store.SeqEntry) ([]byte, error) {
	st, ok := s.store.(BatchStore)
	if !ok {
		return nil, errors.New("batch send: the store cannot write batches")
	}
	seq, msgs := p.fold(seqNo, entry)
	record := seq
	if entry == nil {
		record = nil
	}
	outcomes, err := st.CreateMessages(ctx, p.app.Key, msgs, record, nil)
	if err != nil {
		return nil, err
	}
	if err := s.announce(ctx, p.app.Key, p.msgs, p.devs, outcomes, p.flags, s.readEach(ctx, p.app.Key)); err != nil {
		return nil, err
	}
	return seq.Body(msgs, outcomes), nil
}

// fold returns the plan's seq_no entry and its messages, with the results
// of the names that get no message laid into the entry's prefix and
// suffix and the answers of the messages they precede, so that the
// entry's body (store.BatchSeq.Body) is the whole answer. The messages
// are the plan's own, changed in place (a copy of the thousand was a
// tenth of the bytes a batch send allocated): a plan is committed once.
func (p *BatchPlan) fold(seqNo int64, entry *store.SeqEntry) (*store.BatchSeq, []store.BatchMessage) {
	fixed := func(from, to int) []byte { // results[from:to] joined by commas
		var b []byte
		for i := from; i < to; i++ {
			if len(b) > 0 {
				b = append(b, ',')
			}
			b = appendBatchResult(b, p.results[i])
		}
		return b
	}
	q := &store.BatchSeq{SeqNo: seqNo, Prefix: []byte(`{"resp":[`), Epoch: p.flags.epoch, EpochOK: p.flags.ok}
	if entry != nil {
		q.Entry = *entry
	}
	msgs := p.msgs
	prev := 0
	for j := range msgs {
		pre := fixed(prev, p.index[j])
		if len(pre) > 0 {
			if j == 0 {
				q.Prefix = append(append(q.Prefix, pre...), ',')
			} else {
				bm := &msgs[j]
				for o := range bm.Answers {
					bm.Answers[o] = append(append(append([]byte{}, pre...), ','), bm.Answers[o]...)
				}
			}
		}
		prev = p.index[j] + 1
	}
	if rest := fixed(prev, len(p.results)); len(rest) > 0 {
		if len(msgs) > 0 {
			q.Suffix = append(q.Suffix, ',')
		}
		q.Suffix = append(q.Suffix, rest...)
	}
	q.Suffix = append(q.Suffix, "]}"...)
	return q, msgs
}

// announce hands the dispatcher the stored pending messages of a batch
// write, after failing those whose device was disabled meanwhile (see
// settleDisabled). The messages are stored whatever it returns: an error
// (the store failing the second read) leaves the unsettled ones pending
// and announced, as they were before the check existed. While the
// store's FlagEpoch is still flags, taken before devs were read, no
// device of theirs changed: devs still hold, and they are not read again
// (that read was a tenth of the batch send's CPU in fan-out).
func (s *Service) announce(ctx context.Context, app string, msgs []store.BatchMessage, devs []store.Device, outcomes []int, flags flagMark, read func([]string) ([]store.Device, error)) error {
	if flags.heldBy(s.store) {
		for j, o := range outcomes {
			if m := msgs[j].Message; o == store.BatchStored && m.State == store.StatePending {
				s.router.Notify(m, devs[j])
			}
		}
		return nil
	}
	stored := make([]store.Message, len(msgs))
	for j, o := range outcomes {
		if o == store.BatchStored {
			stored[j] = msgs[j].Message
		}
	}
	settled, err := s.settleDisabled(ctx, app, stored, devs, read)
	for j, m := range stored {
		if m.State == store.StatePending && !settled[j] {
			s.router.Notify(m, devs[j])
		}
	}
	return err
}
