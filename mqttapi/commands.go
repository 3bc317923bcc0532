package mqttapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/cluster"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/store"
)

// SetCommands gives the MQTT API the command domain and the sender that
// puts commands on connections, in the window they share with messages;
// call before devices connect.
func (g *API) SetCommands(svc *command.Service, cs *delivery.CommandSender) {
	g.commands, g.cmds = svc, cs
	if g.dispatch != nil {
		cs.SetFreed(g.dispatch.Freed)
		g.dispatch.SetWindowFreed(cs.Drain)
	}
}

// PublishedCorrelated routes what a device publishes, with the MQTT 5
// Correlation Data it carries: answers and progress reports of commands
// here, anything else to Published.
func (g *API) PublishedCorrelated(s *broker.Session, topic string, qos byte, payload, correlation []byte) error {
	switch topic {
	case command.TopicReply, command.TopicProgress:
		if g.commands == nil {
			return fmt.Errorf("%w: the service takes nothing on %q", broker.ErrTopic, topic)
		}
		return g.commandPublish(s, topic, payload, correlation)
	}
	return g.Published(s, topic, qos, payload)
}

// commandPublish stores an answer or a progress report before it
// returns, so a QoS 1 PUBACK means it is stored. One that breaks the
// topic's rules is refused (v5 PUBACK 0x99); a late, repeated or unknown
// one is acknowledged, dropped and counted.
func (g *API) commandPublish(s *broker.Session, topic string, payload, correlation []byte) error {
	ctx := g.deadlines.get()
	var err error
	if topic == command.TopicReply {
		var r command.Reply
		if r, err = command.ParseReply(payload, correlation); err == nil {
			_, err = g.commands.Answer(ctx, s.AppKey, s.DeviceName, r)
		}
	} else {
		var p command.Progress
		if p, err = command.ParseProgress(payload, correlation); err == nil {
			_, err = g.commands.ReportProgress(ctx, s.AppKey, s.DeviceName, p)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, command.ErrMalformed):
		g.log.Debug("command publish refused", "app", s.AppKey, "device", s.DeviceName, "topic", topic, "err", err)
		return fmt.Errorf("%w: %w", broker.ErrMalformed, err)
	default:
		g.log.Error("store a command answer; publish refused", "app", s.AppKey, "device", s.DeviceName, "topic", topic, "err", err)
		return err
	}
}

// cmdSession returns the device's session here if it takes commands.
func (g *API) cmdSession(appKey, device, topic string) *broker.Session {
	if g.broker == nil {
		return nil
	}
	if s := g.broker.Session(appKey, device); s != nil && s.Subscribed(topic) {
		return s
	}
	return nil
}

// CommandOnline reports whether the device can take a command now:
// subscribed to cmd here, or connected to another node as dev, read just
// before, says.
func (g *API) CommandOnline(dev store.Device) bool {
	if g.cmdSession(dev.AppKey, dev.Name, command.TopicCmd) != nil {
		return true
	}
	return g.peers != nil && dev.Status == 1 && dev.Node != g.node
}

// NotifyCommand sends a queued command to its device: here, or on the
// node that holds it as dev, read before the command was stored, says.
// A device that connects later gets it on subscribing.
func (g *API) NotifyCommand(c store.Command, dev store.Device) {
	if s := g.cmdSession(c.AppKey, c.DeviceName, command.TopicCmd); s != nil {
		g.cmds.Send(context.Background(), s, c)
		return
	}
	if g.peers != nil && dev.Status == 1 && dev.Node != g.node {
		g.send(context.Background(), dev.Node, cluster.Event{Kind: cluster.KindCommand, App: c.AppKey, Device: c.DeviceName})
	}
}

// NotifyCommands is NotifyCommand for each of cmds (devs[i] the device
// of cmds[i]): those whose devices are here are sent together, their
// sent states recorded in one write.
func (g *API) NotifyCommands(cmds []store.Command, devs []store.Device) {
	here := make([]delivery.Addressed, 0, len(cmds))
	for i, c := range cmds {
		if s := g.cmdSession(c.AppKey, c.DeviceName, command.TopicCmd); s != nil {
			here = append(here, delivery.Addressed{Conn: s, Command: c})
			continue
		}
		g.NotifyCommand(c, devs[i])
	}
	g.cmds.SendAll(context.Background(), here)
}

var _ command.BatchRouter = (*API)(nil)

// CancelCommand tells the device holding command c that it was
// cancelled, here or on its node.
func (g *API) CancelCommand(c store.Command) {
	if s := g.cmdSession(c.AppKey, c.DeviceName, command.TopicCancel); s != nil {
		g.cmds.Cancel(s, c.ID)
		return
	}
	if g.peers == nil {
		return
	}
	d, err := g.store.GetDevice(context.Background(), c.AppKey, c.DeviceName)
	if err == nil && d.Status == 1 && d.Node != g.node {
		g.send(context.Background(), d.Node, cluster.Event{Kind: cluster.KindCommandCancel, App: c.AppKey, Device: c.DeviceName, ID: c.ID})
	}
}

// CommandEnded tells the other nodes that command id ended, so the calls
// waiting for it there wake.
func (g *API) CommandEnded(ctx context.Context, _ string, id int64) {
	if g.peers == nil {
		return
	}
	if err := g.peers.SendAll(ctx, cluster.Event{Kind: cluster.KindCommandDone, ID: id}); err != nil {
		g.log.Error("tell the other nodes a command ended", "cmd_id", id, "err", err)
	}
}

// commandEvent acts on another node's word about a command.
func (g *API) commandEvent(ctx context.Context, ev cluster.Event) {
	if g.commands == nil {
		return
	}
	switch ev.Kind {
	case cluster.KindCommand:
		if s := g.cmdSession(ev.App, ev.Device, command.TopicCmd); s != nil {
			go g.cmds.Attach(ctx, s, ev.App, ev.Device, true) // reads the store: off the event loop
		}
	case cluster.KindCommandCancel:
		if s := g.cmdSession(ev.App, ev.Device, command.TopicCancel); s != nil {
			go g.cmds.Cancel(s, ev.ID)
		}
	case cluster.KindCommandDone:
		g.commands.Woken(ev.ID)
	}
}
