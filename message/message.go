package message

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
)

// Limits of a send request (spec section 4.2, DESIGN.md section 2).
const (
	MaxBodyBytes   = 2048
	MaxTTL         = 604800
	DefaultTTL     = 86400
	MaxParamsBytes = 1024
)

// Error codes inside status records (DESIGN.md section 4).
const (
	ErrCodeDeviceDisabled   = 3003
	ErrCodeQueueFull        = 3004
	ErrCodeTTLExpired       = 3005
	ErrCodeDeviceOffline    = 3006
	ErrCodeDeviceDeleted    = 3007
	ErrCodeAlreadyDelivered = 3008
	ErrCodeAlreadyFinished  = 3009
)

// SendRequest is a validated message send.
type SendRequest struct {
	Body        string
	TTL         int64
	CallbackURL string
	Params      json.RawMessage
}

// Service accepts messages.
type Service struct {
	store store.Store
	ids   *idgen.Generator
	now   func() time.Time
}

// NewService returns a Service that stores in st and numbers messages with ids.
func NewService(st store.Store, ids *idgen.Generator) *Service {
	return &Service{store: st, ids: ids, now: time.Now}
}

// Send stores a message for dev. The message is pending for an enabled
// device with room in its queue; otherwise it is stored as failed with
// the record that says why. seqFor builds the seq_no entry to record with
// the message, given its msgid; it may return nil. Errors are the store's
// (store.ErrSeqUsed when the seq_no was recorded meanwhile).
func (s *Service) Send(ctx context.Context, app store.App, dev store.Device, req SendRequest, seqNo int64, seqFor func(msgid int64) *store.SeqEntry) (store.Message, error) {
	now := s.now()
	m := store.Message{
		ID:          s.ids.Next(),
		AppKey:      app.Key,
		DeviceName:  dev.Name,
		Body:        req.Body,
		TTL:         req.TTL,
		TimeCreate:  now.Unix(),
		ExpireTime:  now.Unix() + req.TTL,
		CallbackURL: req.CallbackURL,
		Params:      req.Params,
	}
	seq := seqFor(m.ID)
	if dev.Flag == store.FlagDisabled {
		m.State = store.StateFailed
		m.Records = []store.Record{NewRecord(m, store.RecordTargetInvalid, ErrCodeDeviceDisabled, "device disabled", now)}
		return m, s.store.CreateMessage(ctx, m, seqNo, seq)
	}
	m.State = store.StatePending
	m.Records = []store.Record{
		NewRecord(m, store.RecordTargetValid, 0, "", now),
		NewRecord(m, store.RecordSubmitSuccess, 0, "", now),
	}
	if req.TTL == 0 && dev.Status == 0 {
		// ttl 0 is "now or never" (DESIGN.md section 4): an offline device
		// fails at once and nothing is queued.
		m.State = store.StateFailed
		m.Records = append(m.Records, NewRecord(m, store.RecordDeliveryFailure, ErrCodeDeviceOffline, "device offline and ttl is 0", now))
		return m, s.store.CreateMessage(ctx, m, seqNo, seq)
	}
	err := s.store.CreateMessage(ctx, m, seqNo, seq)
	if errors.Is(err, store.ErrQueueFull) {
		m.State = store.StateFailed
		m.Records[1] = NewRecord(m, store.RecordSubmitFailure, ErrCodeQueueFull, "device queue full: "+strconv.Itoa(store.MaxPending)+" messages pending", now)
		err = s.store.CreateMessage(ctx, m, seqNo, seq)
	}
	return m, err
}

// NewRecord builds a status record of message m as it is stored: the
// fields m already holds are left for Records to fill in, which halves the
// bytes written per message. errCode 0 means no error object.
func NewRecord(m store.Message, typ, errCode int, errMsg string, now time.Time) store.Record {
	r := store.Record{Type: typ, SentTime: now.Unix()}
	if errCode != 0 {
		r.Error = &store.RecordError{Code: errCode, Message: errMsg}
	}
	return r
}

// Records returns m's status records in the callback format, every field
// filled in.
func Records(m store.Message) []store.Record {
	out := make([]store.Record, len(m.Records))
	for i, r := range m.Records {
		out[i] = m.Filled(r)
	}
	return out
}
