package message

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
)

// Limits of a send request, as docs/api.md ("Send a message") states them.
const (
	MaxBodyBytes   = 2048
	MaxTTL         = 604800
	DefaultTTL     = 86400
	MaxParamsBytes = 1024
)

// Error codes inside status records (docs/api.md, "Message states and
// status records").
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

// Router is what Send needs of delivery: whether a device can take a
// message now, and word that one was queued. Both are given the device as
// the caller read it before the send, presence included, so routing costs
// no read of its own (*mqttapi.API is one).
type Router interface {
	Online(dev store.Device) bool
	Notify(m store.Message, dev store.Device)
}

// Store is what the Service needs of the store.
type Store interface {
	GetDevice(ctx context.Context, appKey, name string) (store.Device, error)
	CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error
	GetMessage(ctx context.Context, appKey string, id int64) (store.Message, error)
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error)
}

// Service accepts, retracts and tracks messages.
type Service struct {
	store  Store
	ids    *idgen.Generator
	router Router
	now    func() time.Time
	// lastSend is when the last single send began (Unix ns), so that the
	// fan-out of broadcasts can give way to single sends (Broadcaster).
	lastSend atomic.Int64
}

// NewService returns a Service that stores in st, numbers messages with
// ids and hands queued ones to router (nil: no device is ever online).
func NewService(st Store, ids *idgen.Generator, router Router) *Service {
	if router == nil {
		router = offline{}
	}
	return &Service{store: st, ids: ids, router: router, now: time.Now}
}

// NewIDs returns the generator of the msgids and op_ids of node nodeID
// (0..idgen.MaxNode), past every msgid st holds, so a restarted node never
// hands out an id again even if its clock went back.
func NewIDs(ctx context.Context, nodeID int, st interface {
	LastMessageID(context.Context) (int64, error)
},
) (*idgen.Generator, error) {
	ids, err := idgen.New(nodeID)
	if err != nil {
		return nil, err
	}
	last, err := st.LastMessageID(ctx)
	if err != nil {
		return nil, fmt.Errorf("read last msgid: %w", err)
	}
	ids.Skip(last)
	return ids, nil
}

// SetClock has s take the time from now rather than the system clock,
// as tests that move time by hand need (the delivery tests' sends). Call
// it before s is used.
func (s *Service) SetClock(now func() time.Time) { s.now = now }

type offline struct{}

func (offline) Online(store.Device) bool           { return false }
func (offline) Notify(store.Message, store.Device) {}

// SendTo loads the app's device named device and sends it req, as Send.
// A *errdefs.NotFoundError for an unknown device, whether missing before
// the send or deleted meanwhile.
func (s *Service) SendTo(ctx context.Context, app store.App, device string, req SendRequest, seqNo int64, seqFor func(msgid int64) *store.SeqEntry) (store.Message, error) {
	dev, err := s.store.GetDevice(ctx, app.Key, device)
	if err == nil {
		var m store.Message
		if m, err = s.Send(ctx, app, dev, req, seqNo, seqFor); err == nil {
			return m, nil
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Message{}, errdefs.NotFound("device", device)
	}
	return store.Message{}, fmt.Errorf("send to device %q: %w", device, err)
}

// Send stores a message for dev, the device as read from the store (its
// time_create tells it from a device created again under its name while
// the message is stored). The message is pending for an enabled
// device with room in its queue; otherwise it is stored as failed with
// the record that says why. seqFor builds the seq_no entry to record with
// the message, given its msgid; it may return nil. Errors are the store's
// (store.ErrSeqUsed when the seq_no was recorded meanwhile).
func (s *Service) Send(ctx context.Context, app store.App, dev store.Device, req SendRequest, seqNo int64, seqFor func(msgid int64) *store.SeqEntry) (store.Message, error) {
	now := s.now()
	s.lastSend.Store(now.UnixNano())
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
	if req.TTL == 0 && !s.router.Online(dev) {
		// ttl 0 is "now or never" (docs/api.md): a device that is
		// not connected and subscribed fails at once; nothing is queued.
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
	if err != nil || m.State != store.StatePending {
		return m, err
	}
	settled, err := s.settleDisabled(ctx, app.Key, []store.Message{m}, []store.Device{dev}, s.readEach(ctx, app.Key))
	if !settled[0] {
		s.router.Notify(m, dev)
	}
	return m, err
}

// Get returns the app's message id; a *errdefs.NotFoundError if the app
// has no such message.
func (s *Service) Get(ctx context.Context, appKey string, id int64) (store.Message, error) {
	m, err := s.store.GetMessage(ctx, appKey, id)
	return m, messageErr(id, err)
}

func messageErr(id int64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return errdefs.NotFound("message", id)
	}
	return fmt.Errorf("message %d: %w", id, err)
}

// Retract withdraws the app's message id: a pending message becomes
// retracted (record 7); any other gets record 8 saying why not (3008
// delivered, 3009 expired, retracted or failed) and keeps its state.
// A *errdefs.NotFoundError if the app has no such message.
func (s *Service) Retract(ctx context.Context, appKey string, id int64) (store.Message, error) {
	m, err := s.store.UpdateMessage(ctx, appKey, id, func(m *store.Message) error {
		now := s.now()
		switch m.State {
		case store.StatePending:
			m.State = store.StateRetracted
			m.Records = append(m.Records, NewRecord(*m, store.RecordRetractSuccess, 0, "", now))
		case store.StateDelivered:
			m.Records = append(m.Records, NewRecord(*m, store.RecordRetractionFailed, ErrCodeAlreadyDelivered, "message already delivered", now))
		default:
			m.Records = append(m.Records, NewRecord(*m, store.RecordRetractionFailed, ErrCodeAlreadyFinished, "message already "+m.State, now))
		}
		return nil
	})
	return m, messageErr(id, err)
}
