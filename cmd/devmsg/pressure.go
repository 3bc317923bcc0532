package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/fdbudget"
	"github.com/devmsg/devmsg/store"
)

// Defaults of the keys that keep the service up under pressure
// (docs/operations.md, "Running out of things").
const (
	// defaultConnsPerSource admits a large NAT of devices (or of app
	// servers) behind one address, and keeps one address from holding
	// the node's descriptors.
	defaultConnsPerSource = 2000
	// defaultMinFreeMB leaves Pebble room to flush and compact what it
	// holds, and the service room for presence and deliveries.
	defaultMinFreeMB = 256
)

// validateLimits checks the descriptor, connection and disk limits.
func (c Config) validateLimits() error {
	bad := badConfig
	for _, k := range []struct {
		key string
		v   int
	}{
		{"fd_reserve", c.FDReserve},
		{"http.max_conns_per_source", c.HTTP.MaxConnsPerSource},
		{"http.max_long_polls_per_app", c.HTTP.MaxLongPollsPerApp},
		{"mqtt.max_conns_per_source", c.MQTT.MaxConnsPerSource},
		{"store.min_free_mb", c.Store.MinFreeMB},
	} {
		if k.v < 0 {
			return bad(k.key, "%d is negative (0 turns it off)", k.v)
		}
	}
	return nil
}

// admitConnections raises the descriptor limit to its hard limit and puts
// the bound ports under the budget: per-source caps, and device
// connections refused before the reserve is touched.
func (m *Main) admitConnections() {
	limit, err := fdbudget.RaiseLimit()
	if err != nil {
		m.log.Warn("cannot read the file descriptor limit; connections are not budgeted", "err", err)
	}
	m.budget = fdbudget.New(limit, m.Config.FDReserve)
	m.log.Info("file descriptors", "limit", limit, "reserve", m.budget.Reserve())
	wrap := func(ln net.Listener, name string, class fdbudget.Class, perSource int, sources *fdbudget.Sources) *fdbudget.Listener {
		l := m.budget.Listen(ln, fdbudget.Config{Name: name, Class: class, PerSource: perSource, Sources: sources, Log: m.log})
		m.fdListeners = append(m.fdListeners, l)
		return l
	}
	m.httpLn = wrap(m.httpLn, "http", fdbudget.Other, m.Config.HTTP.MaxConnsPerSource, nil)
	// One cap over the three device listeners: they share the count.
	devices := fdbudget.NewSources()
	for _, id := range []string{"tcp", "tls", "ws"} {
		if ln := m.mqttLns[id]; ln != nil {
			m.mqttLns[id] = wrap(ln, "mqtt-"+id, fdbudget.Devices, m.Config.MQTT.MaxConnsPerSource, devices)
		}
	}
}

// ready is what /readyz asks beyond the store: every listener can accept
// (and has descriptors for a device), and the disk is above its floor.
func (m *Main) ready() error {
	var errs []error
	for _, l := range m.fdListeners {
		if err := l.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.pebble != nil {
		if err := m.pebble.DiskFull(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// longPollRoom says whether a new long-poll leaves the reserve alone.
func (m *Main) longPollRoom() bool { return m.budget == nil || m.budget.Room() }

// maxLongPolls is http.max_long_polls_per_app as restapi takes it (there,
// 0 is its default and negative no cap).
func (m *Main) maxLongPolls() int {
	if m.Config.HTTP.MaxLongPollsPerApp == 0 {
		return -1
	}
	return m.Config.HTTP.MaxLongPollsPerApp
}

// diskFullStart explains a start refused on a full disk.
func diskFullStart(dataDir string, err error) error {
	if errors.Is(err, store.ErrFull) {
		return fmt.Errorf("data_dir %s: %w: free space on its disk (or lower store.min_free_mb) and start again", dataDir, err)
	}
	return err
}

// registerPressureMetrics exports the budget, the refusals and the disk
// floor.
func (m *Main) registerPressureMetrics() {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		gauge("devmsg_fd_limit", "The process's file descriptor limit (raised to the hard limit at start).", func() float64 { return float64(m.budget.Limit()) }),
		gauge("devmsg_fd_reserve", "File descriptors kept from client connections for the store, Redis, callbacks and webhooks (fd_reserve).", func() float64 { return float64(m.budget.Reserve()) }),
		gauge("devmsg_connections_open", "Client connections open on the HTTP and MQTT listeners.", func() float64 { return float64(m.budget.Open()) }),
	}
	for _, l := range m.fdListeners {
		refused := func(reason string, pick func(budget, perSource int64) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_connections_refused_total",
				Help:        "Connections closed as soon as accepted, by listener and reason: fd_budget (client connections at the descriptor budget) or per_source (the source address at its cap).",
				ConstLabels: prometheus.Labels{"listener": l.Name(), "reason": reason}},
				func() float64 { return float64(pick(l.Refused())) })
		}
		cs = append(cs,
			refused("fd_budget", func(b, _ int64) int64 { return b }),
			refused("per_source", func(_, s int64) int64 { return s }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_accept_errors_total",
				Help:        "Failed accepts (out of file descriptors, memory or buffers), retried with a backoff, by listener.",
				ConstLabels: prometheus.Labels{"listener": l.Name()}}, func() float64 { return float64(l.AcceptErrors()) }),
			gauge2("devmsg_listener_up", "1 while the listener can accept a connection (for device listeners: and has descriptors for one), else 0; /readyz fails while one is 0.",
				prometheus.Labels{"listener": l.Name()}, func() float64 {
					if l.Check() != nil {
						return 0
					}
					return 1
				}),
		)
	}
	if p := m.pebble; p != nil {
		cs = append(cs,
			gauge("devmsg_store_disk_full", "1 while the embedded store's disk is under its free-space floor (store.min_free_mb) and writes that add data are refused, else 0.", func() float64 {
				if p.DiskFull() != nil {
					return 1
				}
				return 0
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_store_writes_refused_total",
				Help: "Writes refused because the embedded store's disk was under its free-space floor."}, func() float64 { return float64(p.WritesRefused()) }),
		)
	}
	m.reg.MustRegister(cs...)
}

func gauge2(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
}
