package main

import (
	"log/slog"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// jobLease is the cluster lease of the jobs' runner.
const jobLease = "jobs"

// newJobs builds the jobs' service and runner: the runner makes its
// commands through cmds and gives way while single sends or commands
// are being made.
func newJobs(st store.Store, ids *idgen.Generator, cmds *command.Service, messages *message.Service, log *slog.Logger) *job.Service {
	runner := job.NewRunner(st, cmds, job.Config{
		Busy: func() bool { return messages.Sending() || cmds.Sending() },
	}, log)
	return job.NewService(st, ids, runner)
}

// startJobs runs the jobs' runner: here on a single node, under the
// lease in a cluster.
func (m *Main) startJobs() error {
	r := m.jobs.Runner()
	if m.node != nil {
		m.node.Lead(jobLease, r.Start, r.Stop)
		return nil
	}
	m.jobsStarted = true
	return r.Start()
}
