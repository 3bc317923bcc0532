package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// leaseGauges are the cluster gauges of the leases a node may hold:
// 1 while it holds the lease and runs what the lease guards, else 0.
var leaseGauges = []struct{ lease, name, help string }{
	{callbackLease, "devmsg_cluster_callback_worker", "1 while this node holds the callback lease and delivers the cluster's callbacks, else 0."},
	{broadcastLease, "devmsg_cluster_broadcast_worker", "1 while this node holds the broadcast lease and runs the cluster's broadcast fan-out, else 0."},
	{jobLease, "devmsg_cluster_job_worker", "1 while this node holds the jobs' lease and runs every job, else 0."},
}

// registerMetrics exports the broker's, the dispatcher's and, in a
// cluster, the leases' state.
func (m *Main) registerMetrics() {
	if node := m.node; node != nil {
		for _, g := range leaseGauges {
			lease := g.lease
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, func() float64 {
				if node.Leading(lease) {
					return 1
				}
				return 0
			}))
		}
	}
	registerDeviceMetrics(m.reg, m.broker, m.dispatcher)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_command_answers_dropped_total",
		Help: "Command answers and progress reports acknowledged and dropped: late, repeated, or for a command that ended or is unknown."},
		func() float64 { return float64(m.commands.Dropped()) }))
	m.registerPressureMetrics()
}
