package console

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The series the overview reads, as /metrics exposes them.
const (
	metricConnected       = "devmsg_mqtt_connected_devices"
	metricRecords         = "devmsg_message_records_total" // by app and type
	metricBacklog         = "devmsg_callback_backlog_records"
	metricEvents          = "devmsg_events_appended_total" // by type
	eventTelemetry        = "device.up"
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

// add counts v status records of type typ.
func (c *counts) add(typ string, v float64) {
	switch typ {
	case "0":
		c.Sent += v
	case "1":
		c.Sent += v
		c.Failed += v
	case "3", "5":
		c.Failed += v
	case "4":
		c.Delivered += v
	}
}

// snapshot is what the registry says at one moment.
type snapshot struct {
	// At is when the registry was read.
	At        time.Time
	Connected float64
	counts
	// ByApp is the message counters of each app.
	ByApp map[string]counts
	// Telemetry counts the device.up events appended.
	Telemetry float64
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
	samples []snapshot // oldest first, at most samplesKept
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
	s.samples = append(s.samples, snap)
	if len(s.samples) > samplesKept {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-samplesKept:]...)
	}
}

// overview is the overview page's numbers.
type overview struct {
	snapshot
	// Window is "last hour" once an hour of samples exists, "since
	// start" before; Messages counts over it (the app's own, for an app
	// owner).
	Window   string
	Messages counts
	// Charts are the last hour, one point a minute: the message
	// counters' increases, the connected devices, the telemetry events
	// and the callback backlog.
	Charts []Chart
}

// overview reads the registry now and the counters' increase over the
// last hour, or since the start while there is less than an hour of
// samples (the counters start at zero with the process). With app set,
// the message figures and the backlog are that app's only, and the
// service-wide charts are left out. ok is false when there is no
// registry.
func (s *sampler) overview(app string) (ov overview, ok bool, err error) {
	if s.g == nil {
		return ov, false, nil
	}
	snap, err := s.read()
	if err != nil {
		return ov, false, err
	}
	pick := func(sn snapshot) counts {
		if app != "" {
			return sn.ByApp[app]
		}
		return sn.counts
	}
	ov.snapshot, ov.Window, ov.Messages = snap, windowAll, pick(snap)
	s.mu.Lock()
	samples := append(slices.Clone(s.samples), snap)
	s.mu.Unlock()
	if len(samples) > samplesKept {
		ov.Window = windowHour
		old := pick(samples[len(samples)-samplesKept-1])
		now := ov.Messages
		ov.Messages = counts{
			Sent:      increase(now.Sent, old.Sent),
			Delivered: increase(now.Delivered, old.Delivered),
			Failed:    increase(now.Failed, old.Failed),
		}
	}
	ov.Charts = trendCharts(samples, app, pick)
	return ov, true, nil
}

// ago labels the start of a chart that ends now.
func ago(d time.Duration) string {
	if d < 90*time.Second {
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	}
	return fmt.Sprintf("%d min ago", int(d.Round(time.Minute).Minutes()))
}

// increase is a counter's increase from then to now; a counter that went
// down was reset by a restart, so it counts from 0.
func increase(now, then float64) float64 {
	if now < then {
		return now
	}
	return now - then
}

// trendCharts draws the samples (the newest being the registry now): the
// message counters' increase from one sample to the next, and the gauges
// as sampled. app limits the charts to what the metrics say per app.
func trendCharts(samples []snapshot, app string, pick func(snapshot) counts) []Chart {
	if len(samples) > samplesKept {
		samples = samples[len(samples)-samplesKept:]
	}
	per := func(f func(snapshot) float64) []float64 {
		out := make([]float64, 0, len(samples))
		for i := 1; i < len(samples); i++ {
			out = append(out, increase(f(samples[i]), f(samples[i-1])))
		}
		return out
	}
	gauge := func(f func(snapshot) float64) []float64 {
		out := make([]float64, 0, len(samples))
		for _, sn := range samples {
			out = append(out, f(sn))
		}
		return out
	}
	from := ago(samples[len(samples)-1].At.Sub(samples[0].At))
	empty := "The chart starts once this node has sampled its counters for a minute."
	messages := Chart{ID: "chart-messages", Title: "Messages per minute", From: from, To: "now", Unit: "/min", Empty: empty,
		Series: []Series{
			{"sent", per(func(s snapshot) float64 { return pick(s).Sent })},
			{"delivered", per(func(s snapshot) float64 { return pick(s).Delivered })},
			{"failed", per(func(s snapshot) float64 { return pick(s).Failed })},
		}}
	backlog := Chart{ID: "chart-backlog", Title: "Callback backlog (records)", From: from, To: "now", Empty: empty,
		Series: []Series{{"backlog", gauge(func(s snapshot) float64 {
			if app != "" {
				return s.Backlog[app]
			}
			return s.BacklogTotal()
		})}}}
	if app != "" {
		return []Chart{messages, backlog}
	}
	online := Chart{ID: "chart-online", Title: "Devices online", From: from, To: "now", Empty: empty,
		Series: []Series{{"connected", gauge(func(s snapshot) float64 { return s.Connected })}}}
	telemetry := Chart{ID: "chart-telemetry", Title: "Telemetry events per minute", From: from, To: "now", Unit: "/min", Empty: empty,
		Series: []Series{{"device.up", per(func(s snapshot) float64 { return s.Telemetry })}}}
	return []Chart{messages, online, telemetry, backlog}
}

// read gathers the series the overview needs. It calls the metric types'
// getters only, which are nil-safe: a counter reads its counter value, a
// gauge its gauge value.
func (s *sampler) read() (snapshot, error) {
	mfs, err := s.g.Gather()
	if err != nil && len(mfs) == 0 {
		return snapshot{}, fmt.Errorf("gather: %w", err)
	}
	snap := snapshot{At: time.Now(), Backlog: map[string]float64{}, ByApp: map[string]counts{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if name != metricConnected && name != metricRecords && name != metricBacklog && name != metricEvents {
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
			case metricEvents:
				if typ == eventTelemetry {
					snap.Telemetry += v
				}
			case metricRecords:
				snap.counts.add(typ, v)
				a := snap.ByApp[app]
				a.add(typ, v)
				snap.ByApp[app] = a
			}
		}
	}
	return snap, nil
}
