package redis

import (
	"context"
	"errors"

	"github.com/devmsg/devmsg/store"
)

// errJobsUnbuilt is returned by the job methods until this backend
// keeps jobs.
var errJobsUnbuilt = errors.New("redis store: jobs not built yet")

// CreateJob is not built yet.
func (s *Store) CreateJob(context.Context, store.Job, []string, int64, *store.SeqEntry) error {
	return errJobsUnbuilt
}

// GetJob is not built yet.
func (s *Store) GetJob(context.Context, string, int64) (store.Job, error) {
	return store.Job{}, errJobsUnbuilt
}

// UpdateJob is not built yet.
func (s *Store) UpdateJob(context.Context, string, int64, func(*store.Job) error) (store.Job, error) {
	return store.Job{}, errJobsUnbuilt
}

// StartJob is not built yet.
func (s *Store) StartJob(context.Context, string, int64, int64, int64, []store.JobStart) ([]store.Command, error) {
	return nil, errJobsUnbuilt
}

// JobTargets is not built yet.
func (s *Store) JobTargets(context.Context, string, int64, int64, int) ([]string, error) {
	return nil, errJobsUnbuilt
}

// JobExecutions is not built yet.
func (s *Store) JobExecutions(context.Context, string, int64, string, int64, int) ([]store.Execution, error) {
	return nil, errJobsUnbuilt
}

// ActiveJobs is not built yet: no job is active.
func (s *Store) ActiveJobs(context.Context) ([]store.Job, error) { return nil, nil }
