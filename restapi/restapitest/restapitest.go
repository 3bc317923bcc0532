// Package restapitest builds, on one store, the domain services a
// restapi.Config must carry, for tests of the HTTP surfaces (restapi,
// console, the OpenAPI check) that run without devices, a cluster or a
// callback worker. devmsg serve builds the real ones in cmd/devmsg; this
// package is for tests only.
package restapitest

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Config returns cfg with every service it leaves nil built on st: no
// device is ever online, and nothing hears of device changes or
// redelivered dead letters. The Broadcasts it builds fans out only once
// the test starts it, and so does the runner of its Jobs
// (cfg.Jobs.Runner().Start()).
func Config(st store.Store, cfg restapi.Config) (restapi.Config, error) {
	if cfg.Apps == nil {
		cfg.Apps = appcache.New(st, time.Now)
	}
	if cfg.Messages == nil || cfg.Shadows == nil {
		ids, err := message.NewIDs(context.Background(), cfg.NodeID, st)
		if err != nil {
			return cfg, err
		}
		if cfg.Messages == nil {
			cfg.Messages = message.NewService(st, ids, nil)
		}
		if cfg.Shadows == nil {
			cfg.Shadows = shadow.NewService(st, ids, noDevices{})
		}
	}
	if cfg.Commands == nil {
		ids, err := message.NewIDs(context.Background(), cfg.NodeID, st)
		if err != nil {
			return cfg, err
		}
		cfg.Commands = command.NewService(st, ids, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	if cfg.Jobs == nil {
		ids, err := message.NewIDs(context.Background(), cfg.NodeID, st)
		if err != nil {
			return cfg, err
		}
		runner := job.NewRunner(st, cfg.Commands, job.Config{Poll: 100 * time.Millisecond}, slog.New(slog.DiscardHandler))
		cfg.Jobs = job.NewService(st, ids, runner)
	}
	if cfg.Broadcasts == nil {
		cfg.Broadcasts = message.NewBroadcaster(cfg.Messages, st, message.FanoutConfig{Poll: 100 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	if cfg.DeviceService == nil {
		cfg.DeviceService = devices.NewService(st, noDevices{})
	}
	if cfg.DeadLetters == nil {
		cfg.DeadLetters = callback.NewDeadLetters(st, cfg.Callbacks)
	}
	if cfg.Events == nil {
		cfg.Events = events.NewService(st)
	}
	if cfg.AppService == nil {
		cfg.AppService = apps.NewService(apps.Config{DefaultRateLimit: cfg.DefaultRateLimit}, st, cfg.Apps)
	}
	if cfg.EventWebhooks == nil {
		// Not started: webhooks are added and deleted, never delivered.
		hooks, err := events.NewWebhooks(events.WebhookConfig{BatchSize: 100, RequestTimeout: 10 * time.Second},
			st, cfg.Apps, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		if err != nil {
			return cfg, err
		}
		cfg.EventWebhooks = hooks
	}
	return cfg, nil
}

// noDevices stands for a broker with no device connected.
type noDevices struct{}

func (noDevices) DesiredChanged(context.Context, string, string, store.Shadow) {}
func (noDevices) Disabled(context.Context, string, string)                     {}
func (noDevices) Deleted(context.Context, string, string) error                { return nil }
