package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics exports the broker's, the dispatcher's and, in a
// cluster, the callback lease's state.
func (m *Main) registerMetrics() {
	if node := m.node; node != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devmsg_cluster_callback_worker",
			Help: "1 while this node holds the callback lease and delivers the cluster's callbacks, else 0.",
		}, func() float64 {
			if node.Leading(callbackLease) {
				return 1
			}
			return 0
		}))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devmsg_cluster_broadcast_worker",
			Help: "1 while this node holds the broadcast lease and runs the cluster's broadcast fan-out, else 0.",
		}, func() float64 {
			if node.Leading(broadcastLease) {
				return 1
			}
			return 0
		}))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devmsg_cluster_job_worker",
			Help: "1 while this node holds the jobs' lease and runs every job, else 0.",
		}, func() float64 {
			if node.Leading(jobLease) {
				return 1
			}
			return 0
		}))
	}
	registerDeviceMetrics(m.reg, m.broker, m.dispatcher)
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_command_answers_dropped_total",
		Help: "Command answers and progress reports acknowledged and dropped: late, repeated, or for a command that ended or is unknown."},
		func() float64 { return float64(m.commands.Dropped()) }))
	m.registerPressureMetrics()
}
