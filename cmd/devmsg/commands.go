package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/mqttapi"
	"github.com/devmsg/devmsg/store"
)

// newCommands builds the command domain on ids (the generator messages
// use, moved past every command id stored) and connects it to the MQTT
// API: its delivery, and in a cluster the word that wakes waiting calls
// on the other nodes.
func newCommands(ctx context.Context, st store.Store, ids *idgen.Generator, mq *mqttapi.API, cluster bool, log *slog.Logger) (*command.Service, *delivery.CommandSender, error) {
	last, err := st.LastCommandID(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read last command id: %w", err)
	}
	ids.Skip(last)
	svc := command.NewService(st, ids, log)
	svc.SetRouter(mq)
	if cluster {
		svc.SetWaker(mq)
	}
	cs := delivery.NewCommandSender(st, svc, log)
	mq.SetCommands(svc, cs)
	return svc, cs, nil
}
