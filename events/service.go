package events

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Topics a device publishes to, relative to its prefix d/{app}/{device}/.
const (
	TopicUp    = "up"
	TopicEvent = "event"
)

// Limits of what a device publishes (docs/device-protocol.md, "Telemetry"
// and "Event reports"), and of a pull (docs/events.md, "Pull").
const (
	MaxPayload   = 65536
	MaxSuffix    = 128
	MaxNameLen   = 32
	MaxContent   = 2048
	MaxPullLimit = 1000
	MaxPullWait  = 30 * time.Second
)

// ErrMalformed refuses a publish that breaks the rules of its topic: an
// event report that is not the documented JSON, a payload over the
// limit, a bad topic suffix. Nothing of it is stored.
var ErrMalformed = errors.New("malformed device event")

// Store is what the Service needs of the store.
type Store interface {
	AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error)
	ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error)
	WaitEvents(ctx context.Context, appKey string, after int64) error
}

// Service holds the rules of the event log: what devices may publish, and
// how the app reads the log.
type Service struct {
	store Store
	now   func() time.Time
}

// NewService returns a Service on st.
func NewService(st Store) *Service { return &Service{store: st, now: time.Now} }

// IsUpTopic reports whether topic (relative to the device's prefix) is a
// telemetry topic: "up" or "up/" followed by 1 to 128 bytes of non-empty
// topic levels without wildcards ("up/a/b", not "up//b" or "up/a/").
func IsUpTopic(topic string) bool {
	if topic == TopicUp {
		return true
	}
	suffix, ok := strings.CutPrefix(topic, TopicUp+"/")
	return ok && len(suffix) >= 1 && len(suffix) <= MaxSuffix &&
		!strings.ContainsAny(suffix, "+#\x00") && utf8.ValidString(suffix) &&
		!strings.HasPrefix(suffix, "/") && !strings.HasSuffix(suffix, "/") && !strings.Contains(suffix, "//")
}

// Telemetry stores a device.up for a publish to topic and returns once it
// is durable. ErrMalformed for a bad topic or a payload over 64 KiB.
func (s *Service) Telemetry(ctx context.Context, appKey, device, topic string, qos byte, payload []byte) error {
	if !IsUpTopic(topic) || len(payload) > MaxPayload {
		return ErrMalformed
	}
	return s.Append(ctx, New(TypeUp, appKey, device, s.now(), UpData(topic, qos, payload)))
}

// DeviceEvent stores the device.event of an event report and returns once
// it is durable; ErrMalformed (nothing stored) for a bad report.
func (s *Service) DeviceEvent(ctx context.Context, appKey, device string, payload []byte) error {
	now := s.now()
	r, err := ParseReport(payload, now)
	if err != nil {
		return err
	}
	return s.Append(ctx, New(TypeEvent, appKey, device, now, r))
}

// Append stores events the service makes and returns once they are
// durable.
func (s *Service) Append(ctx context.Context, evs ...store.Event) error {
	_, err := s.store.AppendEvents(ctx, evs)
	return err
}

// Query is a parsed pull request.
type Query struct {
	store.EventQuery
	// Wait long-polls: when no event matches, read again as the log
	// grows until one does or Wait has passed.
	Wait time.Duration
}

// Pull reads the app's log for q. With q.Wait it waits until a matching
// event exists or the wait is over, and returns what it has then (maybe
// nothing, with Next moved past what it examined). A cursor older than
// the log is an *errdefs.InvalidError naming the oldest id, and so is one
// beyond the newest id ever handed out (it would skip the events to come
// up to it, silently) naming the newest. Only the
// waiting is bounded by q.Wait: a read under way when it ends finishes.
func (s *Service) Pull(ctx context.Context, q Query) (store.EventPage, error) {
	waitCtx := ctx
	if q.Wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, q.Wait)
		defer cancel()
	}
	for {
		p, err := s.store.ReadEvents(ctx, q.EventQuery)
		if errors.Is(err, store.ErrEventsTrimmed) {
			return p, errdefs.Invalid("after", "%d is older than the event log: the oldest kept event is %d (the events between were trimmed; pull with after=%d to read on from it)",
				q.After, p.Oldest, max(p.Oldest-1, 0))
		}
		if err == nil && q.After > p.Newest {
			return p, errdefs.Invalid("after", "%d is beyond the newest event id %d (a cursor is an id a pull returned; pull with after=%d, or without after, to read on)",
				q.After, p.Newest, p.Newest)
		}
		if err != nil || len(p.Events) > 0 || q.Wait <= 0 {
			return p, err
		}
		q.After = p.Next
		if err := s.store.WaitEvents(waitCtx, q.AppKey, p.Next); err != nil {
			if waitCtx.Err() != nil {
				return store.EventPage{Next: p.Next, Oldest: p.Oldest, Newest: p.Newest}, nil
			}
			return p, err
		}
	}
}
