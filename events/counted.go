package events

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/store"
)

// CountedStore is a store.Store that counts, by type, the events each of
// its successful writes appends to the log: AppendEvents, and the events
// that come with a device's creation, change, deletion, property report
// or presence reset. Every event reaches the log through one of these, so
// wrapping the store once, below everything that writes, counts them all.
type CountedStore struct {
	store.Store
	appended *prometheus.CounterVec
}

var _ store.Store = (*CountedStore)(nil)

// Counted returns st counting the events it appends; register Collector
// to export the count.
func Counted(st store.Store) *CountedStore {
	appended := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "devmsg_events_appended_total",
		Help: "Events appended to the apps' event logs by this node, by type.",
	}, []string{"type"})
	for _, t := range Types { // every type at 0 until its first event
		appended.WithLabelValues(t)
	}
	return &CountedStore{Store: st, appended: appended}
}

// Collector exports devmsg_events_appended_total{type}.
func (s *CountedStore) Collector() prometheus.Collector { return s.appended }

func (s *CountedStore) count(evs []store.Event) {
	for _, e := range evs {
		s.appended.WithLabelValues(e.Type).Inc()
	}
}

// AppendEvents counts the events once stored.
func (s *CountedStore) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	out, err := s.Store.AppendEvents(ctx, evs)
	if err == nil {
		s.count(out)
	}
	return out, err
}

// CreateDevices counts the events of the devices it created.
func (s *CountedStore) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	errs, err := s.Store.CreateDevices(ctx, appKey, devices)
	if err == nil {
		for i, d := range devices {
			if i < len(errs) && errs[i] == nil {
				s.count(d.Emit)
			}
		}
	}
	return errs, err
}

// UpdateDevice counts the events the stored call of fn set.
func (s *CountedStore) UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error) {
	var emitted []store.Event
	d, err := s.Store.UpdateDevice(ctx, appKey, name, func(d *store.Device) error {
		err := fn(d)
		emitted = d.Emit
		return err
	})
	if err == nil {
		s.count(emitted)
	}
	return d, err
}

// DeleteDevice counts the deletion's events once stored.
func (s *CountedStore) DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error {
	err := s.Store.DeleteDevice(ctx, appKey, name, evs...)
	if err == nil {
		s.count(evs)
	}
	return err
}

// ReportProperties counts the events the stored call of r.Emit returned.
func (s *CountedStore) ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error) {
	var emitted []store.Event
	if emit := r.Emit; emit != nil {
		r.Emit = func(sh store.Shadow) []store.Event {
			emitted = emit(sh)
			return emitted
		}
	}
	sh, err := s.Store.ReportProperties(ctx, r)
	if err == nil {
		s.count(emitted)
	}
	return sh, err
}

// ResetPresence counts the offline events of the devices it reset. (A
// reset that fails part way may have stored some it does not count.)
func (s *CountedStore) ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	var emitted []store.Event
	wrapped := offline
	if offline != nil {
		wrapped = func(d store.Device) []store.Event {
			evs := offline(d)
			emitted = append(emitted, evs...)
			return evs
		}
	}
	n, err := s.Store.ResetPresence(ctx, node, loginBefore, now, wrapped)
	if err == nil {
		s.count(emitted)
	}
	return n, err
}

var _ store.CommandBatcher = (*CountedStore)(nil)

// UpdateCommands counts the events the stored calls of the updates' fns
// set, when the store wrapped is a store.CommandBatcher; otherwise it
// returns errors.ErrUnsupported, and nothing is written.
func (s *CountedStore) UpdateCommands(ctx context.Context, updates []store.CommandUpdate, visible func()) ([]store.Command, []error, error) {
	b, ok := s.Store.(store.CommandBatcher)
	if !ok {
		if visible != nil {
			visible()
		}
		return nil, nil, errors.ErrUnsupported
	}
	emitted := make([][]store.Event, len(updates))
	wrapped := make([]store.CommandUpdate, len(updates))
	for i, u := range updates {
		fn := u.Fn
		u.Fn = func(c *store.Command) error {
			err := fn(c)
			emitted[i] = c.Emit
			return err
		}
		wrapped[i] = u
	}
	out, errs, err := b.UpdateCommands(ctx, wrapped, visible)
	if err == nil {
		for i := range updates {
			if i < len(errs) && errs[i] == nil {
				s.count(emitted[i])
			}
		}
	}
	return out, errs, err
}
