package console

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The series the overview reads, as /metrics exposes them.
const (
	metricConnected       = "devmsg_mqtt_connected_devices"
	metricRecords         = "devmsg_message_records_total" // by app and type
	metricBacklog         = "devmsg_callback_backlog_records"
	labelApp              = "app"
	labelType             = "type"
	samplesKept           = 61 // an hour of one-minute intervals
	windowHour, windowAll = "last hour", "since start"
)

// counts are the message counters at one moment, from the status
// records made: a send is accepted with record 0 (target valid) or 1
// (target invalid); 4 is a delivery; 1, 3 and 5 are failures.
type counts struct {
	Sent, Delivered, Failed float64
}

// snapshot is what the registry says at one moment.
type snapshot struct {
	Connected float64
	counts
	// Backlog is the callback records waiting in delivery queues, by app.
	Backlog map[string]float64
}

// BacklogTotal sums the backlog of every app.
func (s snapshot) BacklogTotal() float64 {
	var n float64
	for _, v := range s.Backlog {
		n += v
	}
	return n
}

// sampler keeps the message counters of the last hour, one sample a
// minute, to show increases over the last hour.
type sampler struct {
	g       prometheus.Gatherer
	mu      sync.Mutex
	samples []counts // oldest first, at most samplesKept
}

func newSampler(g prometheus.Gatherer) *sampler { return &sampler{g: g} }

// sample records the counters now.
func (s *sampler) sample(log *slog.Logger) {
	if s.g == nil {
		return
	}
	snap, err := s.read()
	if err != nil {
		log.Warn("console: read metrics", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, snap.counts)
	if len(s.samples) > samplesKept {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-samplesKept:]...)
	}
}

// overview is the overview page's numbers.
type overview struct {
	snapshot
	// Window is "last hour" once an hour of samples exists, "since
	// start" before; Messages counts over it.
	Window   string
	Messages counts
}

// overview reads the registry now and the counters' increase over the
// last hour, or since the start while there is less than an hour of
// samples (the counters start at zero with the process). ok is false when
// there is no registry.
func (s *sampler) overview() (ov overview, ok bool, err error) {
	if s.g == nil {
		return ov, false, nil
	}
	snap, err := s.read()
	if err != nil {
		return ov, false, err
	}
	ov.snapshot, ov.Window, ov.Messages = snap, windowAll, snap.counts
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == samplesKept {
		old := s.samples[0]
		ov.Window = windowHour
		// A counter that went down was reset by a restart: count from 0.
		since := func(now, then float64) float64 {
			if now < then {
				return now
			}
			return now - then
		}
		ov.Messages = counts{
			Sent:      since(snap.Sent, old.Sent),
			Delivered: since(snap.Delivered, old.Delivered),
			Failed:    since(snap.Failed, old.Failed),
		}
	}
	return ov, true, nil
}

// read gathers the series the overview needs. It calls the metric types'
// getters only, which are nil-safe: a counter reads its counter value, a
// gauge its gauge value.
func (s *sampler) read() (snapshot, error) {
	mfs, err := s.g.Gather()
	if err != nil && len(mfs) == 0 {
		return snapshot{}, fmt.Errorf("gather: %w", err)
	}
	snap := snapshot{Backlog: map[string]float64{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if name != metricConnected && name != metricRecords && name != metricBacklog {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			var app, typ string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case labelApp:
					app = lp.GetValue()
				case labelType:
					typ = lp.GetValue()
				}
			}
			switch name {
			case metricConnected:
				snap.Connected += v
			case metricBacklog:
				snap.Backlog[app] += v
			case metricRecords:
				switch typ {
				case "0":
					snap.Sent += v
				case "1":
					snap.Sent += v
					snap.Failed += v
				case "3", "5":
					snap.Failed += v
				case "4":
					snap.Delivered += v
				}
			}
		}
	}
	return snap, nil
}
