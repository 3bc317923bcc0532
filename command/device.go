package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// ErrMalformed refuses what a device published on a command topic that
// breaks the topic's rules.
var ErrMalformed = errors.New("malformed command payload")

// Topics under a device's prefix.
const (
	TopicCmd      = "cmd"
	TopicReply    = "cmd/reply"
	TopicProgress = "cmd/progress"
	TopicCancel   = "cmd/cancel"
)

// Payload is what the device receives on cmd for c
// (docs/device-protocol.md): {"cmd_id","name","params","timeout",
// "expire_time"}, params null when c has none.
func Payload(c store.Command) []byte {
	b := make([]byte, 0, 96+len(c.Name)+len(c.Params))
	b = append(b, `{"cmd_id":"`...)
	b = strconv.AppendInt(b, c.ID, 10)
	b = append(b, `","name":`...)
	b = jsonfast.AppendString(b, c.Name)
	b = append(b, `,"params":`...)
	if len(c.Params) == 0 {
		b = append(b, "null"...)
	} else if p, err := jsonfast.AppendRaw(b, c.Params); err == nil {
		b = p
	} else {
		b = append(b, "null"...) // params are JSON checked on their way in
	}
	b = append(b, `,"timeout":`...)
	b = strconv.AppendInt(b, c.Timeout, 10)
	b = append(b, `,"expire_time":`...)
	b = strconv.AppendInt(b, c.TimeCreate/1000+c.TTL, 10)
	return append(b, '}')
}

// CancelPayload is what the device receives on cmd/cancel.
func CancelPayload(id int64) []byte {
	return []byte(`{"cmd_id":"` + strconv.FormatInt(id, 10) + `"}`)
}

// Deliverable reports whether c may still be sent to its device at now
// (Unix ms): undelivered, and its ttl not passed.
func Deliverable(c store.Command, now int64) bool {
	return c.Undelivered() && now <= c.TimeCreate+c.TTL*1000+store.CmdExpiryGrace
}

// Sent records that c was published to its device. The write is lazy:
// lost to a crash, the command is sent again with the same cmd_id. It
// reports whether the command was cancelled before this write (see
// SentAt): the device has it and must be told.
func (s *Service) Sent(ctx context.Context, appKey string, id int64) (cancelled bool, err error) {
	_, err = s.update(ctx, appKey, id, func(c *store.Command, now int64) bool {
		err := SentAt(now)(c)
		cancelled = errors.Is(err, ErrCancelledUnsent)
		return err == nil
	})
	return cancelled, err
}

// Delivered records the device's PUBACK of command id: its answer is
// due within the command's timeout from now. The write is synced
// (DeliveredAt).
func (s *Service) Delivered(ctx context.Context, appKey, device string, id int64) error {
	_, err := s.update(ctx, appKey, id, func(c *store.Command, now int64) bool {
		return DeliveredAt(device, now)(c) == nil
	})
	return err
}

// Reply is an answer a device published on cmd/reply.
type Reply struct {
	ID      int64
	Code    int
	Result  json.RawMessage
	Message string
}

// ParseReply reads a cmd/reply payload; correlation is the MQTT 5
// Correlation Data, which gives the id when the payload does not.
func ParseReply(payload, correlation []byte) (Reply, error) {
	p, ok := scanReply(payload)
	if !ok {
		// Afresh: what the scan filled in before it gave up holds a
		// slice of payload (cmd_id), which json.RawMessage would decode
		// into, writing over the payload as the decoder reads it.
		p = replyPayload{}
		if err := json.Unmarshal(payload, &p); err != nil {
			return Reply{}, fmt.Errorf("%w: not a JSON object: %v", ErrMalformed, err)
		}
	}
	id, err := parseID(p.CmdID, correlation)
	if err != nil {
		return Reply{}, err
	}
	if p.Code == nil {
		// An answer without its code is not taken for a success.
		return Reply{}, fmt.Errorf("%w: code missing", ErrMalformed)
	}
	r := Reply{ID: id, Code: *p.Code, Result: p.Result}
	if p.Message != nil {
		r.Message = *p.Message
	}
	if len(r.Result) > MaxResultBytes {
		return Reply{}, fmt.Errorf("%w: result over %d bytes", ErrMalformed, MaxResultBytes)
	}
	if string(r.Result) == "null" {
		r.Result = nil
	}
	return r, nil
}

// replyPayload is a cmd/reply payload as encoding/json decodes it.
type replyPayload struct {
	CmdID   json.RawMessage `json:"cmd_id"`
	Code    *int            `json:"code"`
	Result  json.RawMessage `json:"result"`
	Message *string         `json:"message"`
}

// scanReply reads the usual reply, an object of the four keys spelt as
// documented with an integer code and a plain message, without
// encoding/json's reflection (a fiftieth of the server's CPU in
// command-latency); ok is false for anything else, which encoding/json
// then reads (other spellings of a key, escapes, errors). The result is
// copied: the payload's buffer is the connection's.
func scanReply(payload []byte) (p replyPayload, ok bool) {
	ok = jsonfast.Object(payload, jsonfast.ValueEnd, func(key, value []byte) bool {
		switch string(key) {
		case "cmd_id":
			p.CmdID = value
		case "code":
			n, err := strconv.Atoi(string(value))
			if err != nil {
				return false
			}
			p.Code = &n
		case "result":
			p.Result = bytes.Clone(value)
		case "message":
			if string(value) == "null" {
				p.Message = nil
				return true
			}
			text, plain := jsonfast.PlainText(value)
			if !plain {
				return false
			}
			m := string(text)
			p.Message = &m
		default:
			return false
		}
		return true
	})
	return p, ok
}

// parseID reads a cmd_id given as a decimal string or a number, or from
// correlation when raw is absent.
func parseID(raw json.RawMessage, correlation []byte) (int64, error) {
	var text string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, fmt.Errorf("%w: cmd_id", ErrMalformed)
		}
	case len(raw) > 0 && string(raw) != "null":
		text = string(raw)
	case len(correlation) > 0:
		text = string(correlation)
	default:
		return 0, fmt.Errorf("%w: cmd_id missing", ErrMalformed)
	}
	id, err := strconv.ParseInt(text, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: cmd_id %q is not a command id", ErrMalformed, text)
	}
	return id, nil
}

// Answer stores the device's answer r: the first answer of an open
// command of the device ends it (succeeded with code 0, failed with any
// other); any other answer is dropped and counted, and reports false.
// It returns once the answer is durable.
func (s *Service) Answer(ctx context.Context, appKey, device string, r Reply) (bool, error) {
	if s.answers != nil {
		return s.answers.answer(ctx, appKey, device, r)
	}
	return s.answerAlone(ctx, appKey, device, r)
}

// answerAlone is Answer in a store write of its own.
func (s *Service) answerAlone(ctx context.Context, appKey, device string, r Reply) (bool, error) {
	took := false
	_, err := s.update(ctx, appKey, r.ID, func(c *store.Command, now int64) bool {
		took = s.answerFn(c, device, r, now) // fn runs again when a store retries the write
		return took
	})
	if errors.Is(err, store.ErrNotFound) {
		err = nil
	}
	if err == nil && !took {
		s.dropped.Add(1)
		// The answer that ended the command may still be syncing (a
		// store lets reads see a write before its fsync): durable before
		// this one is acknowledged as taken care of.
		err = s.store.Barrier(ctx)
	}
	return took, err
}

// answerFn ends c with the answer r of device at now, when c is an open
// command of that device, and reports whether it did.
func (s *Service) answerFn(c *store.Command, device string, r Reply, now int64) bool {
	if c.DeviceName != device || !c.Open() {
		return false
	}
	state := store.CmdSucceeded
	if r.Code != 0 {
		state = store.CmdFailed
	}
	if c.TimeSent == 0 {
		c.TimeSent = now
	}
	if c.TimeDelivered == 0 {
		c.TimeDelivered = now
	}
	c.Answered = true
	s.finish(c, state, r.Code, r.Result, r.Message, now)
	return true
}

// Progress is a progress report a device published on cmd/progress.
type Progress struct {
	ID       int64
	Progress int
	Details  json.RawMessage
}

// ParseProgress reads a cmd/progress payload.
func ParseProgress(payload, correlation []byte) (Progress, error) {
	var p struct {
		CmdID    json.RawMessage `json:"cmd_id"`
		Progress *int            `json:"progress"`
		Details  json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return Progress{}, fmt.Errorf("%w: not a JSON object: %v", ErrMalformed, err)
	}
	id, err := parseID(p.CmdID, correlation)
	if err != nil {
		return Progress{}, err
	}
	if p.Progress == nil || *p.Progress < 0 || *p.Progress > 100 {
		return Progress{}, fmt.Errorf("%w: progress must be 0 to 100", ErrMalformed)
	}
	if len(p.Details) > MaxDetailsBytes {
		return Progress{}, fmt.Errorf("%w: details over %d bytes", ErrMalformed, MaxDetailsBytes)
	}
	if string(p.Details) == "null" {
		p.Details = nil
	}
	return Progress{ID: id, Progress: *p.Progress, Details: p.Details}, nil
}

// ReportProgress stores a progress report of an open command of the
// device: it is in progress, and its answer is due a whole timeout from
// now. A report for any other command is dropped and counted.
func (s *Service) ReportProgress(ctx context.Context, appKey, device string, p Progress) (bool, error) {
	took := false
	_, err := s.update(ctx, appKey, p.ID, func(c *store.Command, now int64) bool {
		took = false // fn runs again when a store retries the write
		if c.DeviceName != device || !c.Open() {
			return false
		}
		if c.TimeSent == 0 {
			c.TimeSent = now
		}
		if c.TimeDelivered == 0 {
			c.TimeDelivered = now
		}
		c.State, c.Progress, c.Deadline = store.CmdInProgress, p.Progress, now+c.Timeout*1000
		c.Emit = append(c.Emit, progressEvent(*c, p.Details, now))
		took = true
		return true
	})
	if errors.Is(err, store.ErrNotFound) {
		err = nil
	}
	if err == nil && !took {
		s.dropped.Add(1)
	}
	return took, err
}

// DeviceGone rejects the device's commands not yet delivered, with
// code (store.CodeDeviceDisabled or store.CodeDeviceDeleted): the device
// was disabled or is about to be deleted.
func (s *Service) DeviceGone(ctx context.Context, appKey, device string, code int) error {
	msg := "device disabled"
	if code == store.CodeDeviceDeleted {
		msg = "device deleted"
	}
	for {
		open, err := s.store.OpenCommands(ctx, appKey, device, store.MaxOpenCommands)
		if err != nil {
			return err
		}
		n := 0
		for _, c := range open {
			if !c.Undelivered() {
				continue
			}
			if _, err := s.update(ctx, appKey, c.ID, func(c *store.Command, now int64) bool {
				if !c.Undelivered() {
					return false
				}
				s.finish(c, store.CmdRejected, code, nil, msg, now)
				return true
			}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			n++
		}
		if n == 0 {
			return nil
		}
	}
}
