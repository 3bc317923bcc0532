package command

import (
	"context"
	"fmt"

	"github.com/devmsg/devmsg/store"
)

// JobTarget is one command a job step starts: the target's device,
// its place in the job and the attempt.
type JobTarget struct {
	DeviceName string
	Index      int64
	Attempt    int
}

// StartJob makes one step of job j: a command for each of targets, as
// Send makes them (disabled devices rejected, ttl 0 to an offline
// device offline, a deleted device rejected by the store), stored with
// the job's move to next in one durable write (store.Jobs StartJob),
// then handed to delivery. store.ErrVersionConflict when j moved on
// meanwhile: nothing was made.
func (s *Service) StartJob(ctx context.Context, j store.Job, next int64, targets []JobTarget) ([]store.Command, error) {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.DeviceName
	}
	devs, err := s.store.GetDevices(ctx, j.AppKey, names)
	if err != nil {
		return nil, fmt.Errorf("read devices: %w", err)
	}
	byName := make(map[string]store.Device, len(devs))
	for _, d := range devs {
		byName[d.Name] = d
	}
	req := Request{Name: j.Command.Name, Params: j.Command.Params, TTL: j.TTL, Timeout: j.Command.Timeout}
	now := s.now().UnixMilli()
	starts := make([]store.JobStart, len(targets))
	for i, t := range targets {
		dev, ok := byName[t.DeviceName]
		var c store.Command
		if ok {
			c = s.newCommand(j.AppKey, dev, req, now)
		} else { // deleted since the job was accepted: the store rejects it (3007)
			c = store.Command{ID: s.ids.Next(), AppKey: j.AppKey, DeviceName: t.DeviceName, Name: req.Name,
				Params: req.Params, TTL: req.TTL, Timeout: req.Timeout, State: store.CmdQueued, TimeCreate: now}
		}
		c.Job, c.JobIndex, c.Attempt = j.ID, t.Index, t.Attempt
		for k := range c.Emit {
			c.Emit[k] = doneEvent(c, now)
		}
		starts[i] = store.JobStart{Command: c}
	}
	stored, err := s.store.StartJob(ctx, j.AppKey, j.ID, j.Step, next, starts)
	if err != nil {
		return nil, err
	}
	for _, c := range stored {
		if c.State == store.CmdQueued {
			s.router.NotifyCommand(c, byName[c.DeviceName])
		}
	}
	return stored, nil
}
