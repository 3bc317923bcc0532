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
	metricPublished       = "devmsg_messages_published_total"
	metricDelivered       = "devmsg_messages_delivered_total"
	metricExpired         = "devmsg_messages_expired_total"
	metricCallbackQueued  = "devmsg_callback_records_queued_total"
	metricCallbackDone    = "devmsg_callback_records_delivered_total"
	metricCallbackDead    = "devmsg_callback_records_dead_lettered_total"
	labelApp              = "app"
	samplesKept           = 61 // an hour of one-minute intervals
	windowHour, windowAll = "last hour", "since start"
)

// counts are the message counters at one moment.
type counts struct {
	Published, Delivered, Expired float64
}

// snapshot is what the registry says at one moment.
type snapshot struct {
	Connected float64
	counts
	// Backlog is queued minus delivered minus dead-lettered callback
	// records, by app ("" for series without an app label).
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
		ov.Messages = counts{
			Published: snap.Published - old.Published,
			Delivered: snap.Delivered - old.Delivered,
			Expired:   snap.Expired - old.Expired,
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
		var sign float64
		var total *float64
		switch mf.GetName() {
		case metricConnected:
			total = &snap.Connected
		case metricPublished:
			total = &snap.Published
		case metricDelivered:
			total = &snap.Delivered
		case metricExpired:
			total = &snap.Expired
		case metricCallbackQueued:
			sign = 1
		case metricCallbackDone, metricCallbackDead:
			sign = -1
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			if total != nil {
				*total += v
				continue
			}
			app := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labelApp {
					app = lp.GetValue()
				}
			}
			snap.Backlog[app] += sign * v
		}
	}
	return snap, nil
}
