package callback

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus series, labelled by app key.
type metrics struct {
	queued, delivered, retried, dead *prometheus.CounterVec
	records                          *prometheus.CounterVec // app, type
	backlog                          *prometheus.GaugeVec
	dropped                          *prometheus.CounterVec // app, reason
	requests                         *prometheus.CounterVec // app, outcome
	lag                              *prometheus.HistogramVec
	requestSeconds                   *prometheus.HistogramVec
	apps                             sync.Map // app keys whose series exist
}

// dropReasons are the reason labels of devmsg_callback_records_dropped_total,
// as route and the senders give them.
var dropReasons = []string{"no app", "switch off", "type not selected", "no url"}

// app makes every series of the app exist, at 0 until counted: a
// dashboard's rate of failed POSTs then reads 0 rather than "no data"
// until the first failure. Every label but the app has a known set of
// values: record types 0 to 8, the drop reasons, ok and failed.
func (m *metrics) app(key string) {
	if _, seen := m.apps.LoadOrStore(key, true); seen {
		return
	}
	for t := 0; t <= 8; t++ {
		m.records.WithLabelValues(key, strconv.Itoa(t))
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(key, r)
	}
	for _, o := range []string{"ok", "failed"} {
		m.requests.WithLabelValues(key, o)
	}
	for _, c := range []*prometheus.CounterVec{m.queued, m.delivered, m.retried, m.dead} {
		c.WithLabelValues(key)
	}
	m.backlog.WithLabelValues(key)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		queued:    counter("devmsg_callback_records_queued_total", "Status records routed to a callback URL's delivery queue.", "app"),
		delivered: counter("devmsg_callback_records_delivered_total", "Status records delivered (the URL answered HTTP 200).", "app"),
		retried:   counter("devmsg_callback_records_retried_total", "Status records whose batch failed and was scheduled again.", "app"),
		dead:      counter("devmsg_callback_records_dead_lettered_total", "Status records moved to the dead-letter list after every retry failed.", "app"),
		dropped:   counter("devmsg_callback_records_dropped_total", "Status records not sent: the switch was off, the type not selected, or the app had no URL.", "app", "reason"),
		requests:  counter("devmsg_callback_requests_total", "Callback POSTs by outcome (ok: HTTP 200; failed: anything else).", "app", "outcome"),
		records:   counter("devmsg_message_records_total", "Message status records made, by type (0-8), whether or not callbacks are on.", "app", "type"),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "devmsg_callback_backlog_records",
			Help: "Status records waiting in delivery queues (retries and batches in flight included).",
		}, []string{"app"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devmsg_callback_delivery_lag_seconds",
			Help:    "Time from a status record being written to its delivery, batching and retries included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 180, 600},
		}, []string{"app"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devmsg_callback_request_seconds",
			Help:    "Duration of successful callback POSTs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"app"}),
	}
	for _, c := range []prometheus.Collector{m.queued, m.delivered, m.retried, m.dead, m.dropped, m.requests, m.records, m.backlog, m.lag, m.requestSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
