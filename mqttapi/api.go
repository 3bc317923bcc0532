package mqttapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/cluster"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/presence"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Service topics: what the service publishes under a device's prefix.
// Commands come first: a SUBSCRIBE reports its topics in this order
// (broker.Config.ServiceTopics), and Subscribed sends the waiting
// commands before it starts the messages, so that after a reconnect a
// message resent from the last connection does not go ahead of them.
var ServiceTopics = []string{command.TopicCmd, command.TopicCancel, delivery.TopicMsg, shadow.TopicDesired, shadow.TopicReportReply}

// AnswerTopics are the device → service topics on which a device answers
// what the service asked it (broker.Config.AnswerTopics): a command's
// reply. Progress reports stay under the publish rate.
var AnswerTopics = []string{command.TopicReply}

// Topics a device publishes to.
const TopicClick = "msg/click"

// stripes serialise presence writes per device (see Connected).
const stripes = 256

// attachRecheck is when, in cluster mode, a device's queue is read again
// after it subscribed to msg (see Subscribed).
const attachRecheck = 2 * time.Second

// Peers reaches the other nodes of a cluster; *cluster.Node is one.
type Peers interface {
	// ID is this node's node_id.
	ID() int
	// Token tells this process apart from every other, past or present.
	Token() string
	// Send asks the node with node_id node to act on ev.
	Send(ctx context.Context, node int, ev cluster.Event) error
	// SendAll tells every node, this one included, of ev.
	SendAll(ctx context.Context, ev cluster.Event) error
}

// Store is what the MQTT API needs of the store: devices' credentials and
// presence, and their apps.
type Store interface {
	GetApp(ctx context.Context, key string) (store.App, error)
	GetDevice(ctx context.Context, appKey, name string) (store.Device, error)
	UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error)
}

var _ Store = store.Store(nil)

// API connects devices to the service: it implements broker.Handler
// for the devices connected here, message.Router and the API's device
// events for every device, and cluster.Handler for what other nodes ask.
// The presence entry of a device (store.Device Node and Conn) says which
// node and connection hold it; work for a device held elsewhere goes
// there as a cluster event.
type API struct {
	store    Store
	dispatch *delivery.Dispatcher
	sync     *shadow.Sync
	events   *events.Service
	log      *slog.Logger
	now      func() time.Time
	broker   *broker.Broker
	// commands and cmds are the command domain and its sender; nil
	// until SetCommands.
	commands *command.Service
	cmds     *delivery.CommandSender

	// node and token name this node's connections; peers is nil on a
	// single node.
	node  int
	token string
	peers Peers
	// recorded holds the sessions whose login is in the store, the ones
	// Resync may judge by their presence entry.
	recorded sync.Map // *broker.Session → struct{}
	// presence applies the presence rules to the connections of this
	// process.
	presence presence.Tracker

	locks [stripes]sync.Mutex
	// deadlines bound the store writes of what devices publish.
	deadlines storeDeadlines

	// retry holds, per device, the latest presence write of this node
	// that failed (Redis down, say), until it lands or a newer write of
	// the device supersedes it; armed says a retry is scheduled.
	retryMu sync.Mutex
	retry   map[devKey]presenceWrite
	armed   bool
}

// retryEvery is how often failed presence writes are tried again.
const retryEvery = 2 * time.Second

type devKey struct{ app, dev string }

// presenceWrite is a login of session s, or a logout of connection conn
// at time at, reported by the event off.
type presenceWrite struct {
	login bool
	s     *broker.Session
	conn  string
	at    int64
	off   store.Event
}

var (
	_ broker.Handler  = (*API)(nil)
	_ message.Router  = (*API)(nil)
	_ cluster.Handler = (*API)(nil)
	_ command.Router  = (*API)(nil)
	_ command.Waker   = (*API)(nil)

	_ broker.CorrelatedHandler = (*API)(nil)
)

// New returns an API; SetBroker must be called before devices connect,
// and SetPeers too in cluster mode. ev stores what devices publish as
// events.
func New(st Store, d *delivery.Dispatcher, sy *shadow.Sync, ev *events.Service, log *slog.Logger) *API {
	return &API{store: st, dispatch: d, sync: sy, events: ev, log: log, now: time.Now, token: secret.Alnum(16)}
}

// SetPeers puts the MQTT API in cluster mode, as a node of p.
func (g *API) SetPeers(p Peers) { g.peers, g.node, g.token = p, p.ID(), p.Token() }

// connID names a connection uniquely across nodes and restarts.
func (g *API) connID(s *broker.Session) string {
	return g.token + "-" + strconv.FormatUint(s.ID, 10)
}

// SetBroker gives the MQTT API the broker whose sessions it serves (the
// broker needs the MQTT API first, as its Handler).
func (g *API) SetBroker(b *broker.Broker) { g.broker = b }

func (g *API) lock(app, dev string) func() {
	h := uint32(2166136261)
	for _, s := range [2]string{app, dev} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
		h *= 16777619
	}
	m := &g.locks[h%stripes]
	m.Lock()
	return m.Unlock
}

// Authenticate admits an enabled device of the app with its secret. It
// compares the secret whatever happens, against a stand-in when the
// device cannot be read, so that an unknown device is not answered
// sooner than a wrong secret.
func (g *API) Authenticate(appKey, device, sec string) error {
	d, err := g.store.GetDevice(context.Background(), appKey, device)
	if err != nil {
		secretEqual(dummySecret, sec)
		if !errors.Is(err, store.ErrNotFound) {
			g.log.Error("authenticate device", "app", appKey, "device", device, "err", err)
		}
		return broker.ErrNotAuthorized
	}
	if !secretEqual(d.Secret, sec) || d.Flag != store.FlagEnabled {
		return broker.ErrNotAuthorized
	}
	return nil
}

// dummySecret is what Authenticate compares with when there is no device.
var dummySecret = secret.Alnum(32)

// secretEqual is secret.Equal; tests count the compares through it.
var secretEqual = secret.Equal

// Connected marks the device online, held by this connection. Presence
// writes of one device are serialised here and Disconnected writes only
// for the connection the device's entry names, so whatever order a
// takeover's events arrive in, the device ends online. A connection the
// device still had on another node is closed there.
func (g *API) Connected(s *broker.Session) {
	defer g.lock(s.AppKey, s.DeviceName)()
	k := devKey{s.AppKey, s.DeviceName}
	g.supersede(k)
	err := g.login(s)
	if errors.Is(err, presence.ErrDisabled) || errors.Is(err, store.ErrNotFound) {
		s.Close()
		return
	}
	if err != nil {
		g.log.Error("record login; will retry", "app", s.AppKey, "device", s.DeviceName, "err", err)
		g.later(k, presenceWrite{login: true, s: s})
	}
}

// login records s as the device's connection, under the device's lock,
// with its device.online in the same write (presence.Tracker.Login), and
// closes the connection the device still had on another node.
func (g *API) login(s *broker.Session) error {
	t, c := g.now(), g.conn(s)
	var prev store.Device
	_, err := g.store.UpdateDevice(context.Background(), s.AppKey, s.DeviceName, func(d *store.Device) (err error) {
		prev, err = g.presence.Login(d, c, t)
		return err
	})
	if errors.Is(err, presence.ErrUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	g.recorded.Store(s, struct{}{})
	if g.peers != nil && prev.Status == 1 && prev.Node != g.node {
		g.send(context.Background(), prev.Node, cluster.Event{Kind: cluster.KindKick, App: s.AppKey, Device: s.DeviceName, Conn: prev.Conn})
	}
	return nil
}

// Disconnected marks the device offline unless a newer connection, here
// or on another node, holds it.
func (g *API) Disconnected(s *broker.Session) {
	g.recorded.Delete(s)
	g.dispatch.Detach(s, s.AppKey, s.DeviceName)
	if g.cmds != nil {
		g.cmds.Detach(s)
	}
	defer g.lock(s.AppKey, s.DeviceName)()
	defer g.presence.Forget(g.connID(s))
	if !s.Current() {
		return // taken over here: the newer session's login stands
	}
	k := devKey{s.AppKey, s.DeviceName}
	g.supersede(k)
	t := g.now()
	w := presenceWrite{conn: g.connID(s), at: t.Unix(), off: g.logoutEvent(s, t)}
	if err := g.logout(k, w); err != nil {
		g.log.Error("record logout; will retry", "app", s.AppKey, "device", s.DeviceName, "err", err)
		g.later(k, w)
	}
}

// logout marks the device offline, with its device.offline in the same
// write, if w's connection still holds it (presence.Logout); under the
// device's lock.
func (g *API) logout(k devKey, w presenceWrite) error {
	_, err := g.store.UpdateDevice(context.Background(), k.app, k.dev, func(d *store.Device) error {
		return presence.Logout(d, g.node, w.conn, w.at, w.off)
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, presence.ErrUnchanged) {
		return nil
	}
	return err
}

// supersede drops the failed presence write of the device waiting for a
// retry: a newer one is being made. Under the device's lock.
func (g *API) supersede(k devKey) {
	g.retryMu.Lock()
	delete(g.retry, k)
	g.retryMu.Unlock()
}

// later keeps w to be tried again, and schedules the retry. Under the
// device's lock.
func (g *API) later(k devKey, w presenceWrite) {
	g.retryMu.Lock()
	defer g.retryMu.Unlock()
	if g.retry == nil {
		g.retry = map[devKey]presenceWrite{}
	}
	g.retry[k] = w
	if !g.armed {
		g.armed = true
		time.AfterFunc(retryEvery, g.retryPresence)
	}
}

// retryPresence tries the failed presence writes again, so a device that
// connected or left while the store was unreachable ends with the right
// presence once it is back; what fails again waits for the next round.
func (g *API) retryPresence() {
	g.retryMu.Lock()
	work := g.retry
	g.retry, g.armed = nil, false
	g.retryMu.Unlock()
	for k, w := range work {
		unlock := g.lock(k.app, k.dev)
		g.retryMu.Lock()
		_, newer := g.retry[k] // failed again since, newer than w
		g.retryMu.Unlock()
		var err error
		switch {
		case newer:
		case !w.login:
			err = g.logout(k, w)
		case w.s.Live() && w.s.Current():
			if err = g.login(w.s); errors.Is(err, presence.ErrDisabled) || errors.Is(err, store.ErrNotFound) {
				go w.s.Close()
				err = nil
			}
		}
		if err != nil {
			g.later(k, w)
		} else if !newer {
			g.log.Info("recorded a presence change that had failed", "app", k.app, "device", k.dev, "online", w.login)
		}
		unlock()
	}
}

// Subscribed starts message delivery, sends the desired document, or
// sends the commands waiting (before it returns, so ahead of the
// messages of the same SUBSCRIBE).
func (g *API) Subscribed(s *broker.Session, topic string) {
	switch topic {
	case delivery.TopicMsg:
		g.dispatch.Attach(s, s.AppKey, s.DeviceName)
		if g.peers != nil {
			// A message stored by a request that read this device's
			// presence before this login woke its old node, or none:
			// look at the queue again once such requests are done.
			time.AfterFunc(attachRecheck, func() { g.dispatch.Wake(s.AppKey, s.DeviceName) })
		}
	case shadow.TopicDesired:
		g.sync.SendDesired(context.Background(), s, s.AppKey, s.DeviceName, true)
	case command.TopicCmd:
		if g.cmds != nil {
			g.cmds.Attach(context.Background(), s, s.AppKey, s.DeviceName, false)
		}
	}
}

// Unsubscribed stops message delivery when the device drops its last
// subscription to msg, and command delivery when it drops cmd (commands
// waiting for the window stay queued); PUBACKs of what was sent still
// count, and a new SUBSCRIBE on the connection goes on where delivery
// stopped.
func (g *API) Unsubscribed(s *broker.Session, topic string) {
	switch {
	case topic == delivery.TopicMsg:
		g.dispatch.Unsubscribe(s, s.AppKey, s.DeviceName)
	case topic == command.TopicCmd && g.cmds != nil:
		g.cmds.Unsubscribe(s, s.AppKey, s.DeviceName)
	}
}

// Published routes what a device sends. Telemetry and event reports are
// stored as events before it returns, so that the broker acknowledges
// them only once they are durable; one that cannot be stored is refused
// (see deviceEvent). A publish to any other topic is refused
// (broker.ErrTopic): acknowledging it would tell the device it was taken.
func (g *API) Published(s *broker.Session, topic string, qos byte, payload []byte) error {
	ctx := context.Background()
	switch topic {
	case events.TopicEvent:
		return g.deviceEvent(s, topic, func(ctx context.Context) error {
			return g.events.DeviceEvent(ctx, s.AppKey, s.DeviceName, payload)
		})
	case TopicClick:
		var c struct {
			MsgID json.RawMessage `json:"msgid"`
		}
		id, err := int64(0), json.Unmarshal(payload, &c)
		if err == nil {
			id, err = parseMsgID(c.MsgID)
		}
		if err != nil {
			g.log.Debug("bad click payload", "app", s.AppKey, "device", s.DeviceName)
			return nil
		}
		if err := g.dispatch.Click(ctx, s.AppKey, s.DeviceName, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			g.log.Error("record click", "app", s.AppKey, "device", s.DeviceName, "msgid", id, "err", err)
		}
	case shadow.TopicGet:
		g.sync.SendDesired(ctx, s, s.AppKey, s.DeviceName, false)
	case shadow.TopicReport:
		app, err := g.store.GetApp(ctx, s.AppKey)
		if err != nil {
			g.log.Error("load app for report", "app", s.AppKey, "err", err)
			return nil
		}
		g.sync.Report(ctx, s, app, s.DeviceName, payload)
	default:
		if topic == events.TopicUp || strings.HasPrefix(topic, events.TopicUp+"/") {
			return g.deviceEvent(s, topic, func(ctx context.Context) error {
				return g.events.Telemetry(ctx, s.AppKey, s.DeviceName, topic, qos, payload)
			})
		}
		g.log.Debug("publish to an unknown topic refused", "app", s.AppKey, "device", s.DeviceName, "topic", topic)
		return fmt.Errorf("%w: the service takes nothing on %q", broker.ErrTopic, topic)
	}
	return nil
}

// deviceEvent runs write, which stores an event the device published,
// and tells the broker how to answer: nil once it is durable, a refusal
// the device can tell apart (broker.ErrMalformed) when the publish
// breaks the rules of its topic, else the store's error (the device
// publishes it again).
func (g *API) deviceEvent(s *broker.Session, topic string, write func(context.Context) error) error {
	err := write(g.deadlines.get())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, events.ErrMalformed):
		g.log.Debug("device event refused", "app", s.AppKey, "device", s.DeviceName, "topic", topic, "err", err)
		return fmt.Errorf("%w: %w", broker.ErrMalformed, err)
	case errors.Is(err, store.ErrFull):
		// Quota exceeded (MQTT 5 PUBACK 0x97): the device publishes it
		// again later. Not logged per publish: the store logs its state.
		g.log.Debug("device event refused: storage full", "app", s.AppKey, "device", s.DeviceName, "topic", topic, "err", err)
		return fmt.Errorf("%w: %w", broker.ErrQuota, err)
	default:
		g.log.Error("store device event; publish refused", "app", s.AppKey, "device", s.DeviceName, "topic", topic, "err", err)
		return err
	}
}

// parseMsgID accepts the msgid as a JSON string (as the service sends it)
// or a number.
func parseMsgID(raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strconv.ParseInt(s, 10, 64)
	}
	var n int64
	err := json.Unmarshal(raw, &n)
	return n, err
}

// Acked passes a PUBACK to command or message delivery. The PUBACK of a
// control publish (broker.Session.PublishControl) is neither's: the place
// it freed in the device's window goes to the commands waiting for one
// (CommandSender.Acked drains them whatever the PUBACK), then to the
// messages.
func (g *API) Acked(s *broker.Session, pid uint16) {
	if g.cmds != nil && g.cmds.Acked(s, s.AppKey, s.DeviceName, pid) {
		return
	}
	if !g.dispatch.Acked(s, s.AppKey, s.DeviceName, pid) {
		g.dispatch.Freed(s, s.AppKey, s.DeviceName)
	}
}

// DesiredChanged pushes a new desired document to the connected device.
func (g *API) DesiredChanged(ctx context.Context, appKey, device string, sh store.Shadow) {
	if s := g.broker.Session(appKey, device); s != nil {
		g.sync.Push(s, sh)
		return
	}
	g.tell(ctx, appKey, device, cluster.KindDesired)
}

// Disabled disconnects the device and fails its pending messages (5/3003).
func (g *API) Disabled(ctx context.Context, appKey, device string) {
	g.kick(ctx, appKey, device)
	if g.commands != nil {
		if err := g.commands.DeviceGone(ctx, appKey, device, store.CodeDeviceDisabled); err != nil {
			g.log.Error("reject the commands of a disabled device", "app", appKey, "device", device, "err", err)
		}
	}
	if err := g.dispatch.FailPending(ctx, appKey, device, message.ErrCodeDeviceDisabled, "device disabled"); err != nil {
		g.log.Error("fail pending messages of a disabled device", "app", appKey, "device", device, "err", err)
	}
}

// Deleted disconnects a device that is about to be deleted and fails its
// pending messages (5/3007). The device is already disabled, so it cannot
// connect again meanwhile. An error leaves messages pending, and the
// caller does not delete the device then: its queue would be lost.
func (g *API) Deleted(ctx context.Context, appKey, device string) error {
	g.kick(ctx, appKey, device)
	if g.commands != nil {
		if err := g.commands.DeviceGone(ctx, appKey, device, store.CodeDeviceDeleted); err != nil {
			return fmt.Errorf("reject the commands of %s/%s: %w", appKey, device, err)
		}
	}
	if err := g.dispatch.FailPending(ctx, appKey, device, message.ErrCodeDeviceDeleted, "device deleted"); err != nil {
		return fmt.Errorf("fail pending messages of %s/%s: %w", appKey, device, err)
	}
	return nil
}

// kick disconnects the device wherever it is connected, and marks it
// offline (kicked) at once rather than when the connection's end is
// reported: a delete that follows must not beat the device's offline
// event, and the connection's own logout, here or on another node,
// then finds the device offline and writes nothing. Only the connection
// held when kick began is marked offline, never a newer one (of a device
// enabled again meanwhile).
func (g *API) kick(ctx context.Context, appKey, device string) {
	held, err := g.store.GetDevice(ctx, appKey, device)
	if !g.broker.Kick(appKey, device) {
		g.tell(ctx, appKey, device, cluster.KindKick)
	}
	if err != nil || held.Status != 1 {
		return // not found, or the connection's own logout reports it
	}
	defer g.lock(appKey, device)()
	t := g.now()
	_, err = g.store.UpdateDevice(ctx, appKey, device, func(d *store.Device) error {
		return g.presence.Kicked(d, held, appKey, device, t)
	})
	if err != nil && !errors.Is(err, presence.ErrUnchanged) && !errors.Is(err, store.ErrNotFound) {
		g.log.Error("mark a kicked device offline", "app", appKey, "device", device, "err", err)
	}
}

// Online reports whether the device can take a message now: subscribed
// here, or connected to another node as d, read just before, says.
func (g *API) Online(d store.Device) bool {
	if g.dispatch.Online(d.AppKey, d.Name) {
		return true
	}
	return g.peers != nil && d.Status == 1 && d.Node != g.node
}

// Notify wakes the delivery of a queued message, here or on the node that
// holds its device as d, read before the message was stored, says. A
// device that moved in between subscribed on its new node either after
// the message was stored, and got it with everything pending, or just
// before: then that node's second look at the queue, attachRecheck after
// the subscription, sends it.
func (g *API) Notify(m store.Message, d store.Device) {
	if g.peers == nil || g.dispatch.Online(m.AppKey, m.DeviceName) {
		g.dispatch.Notify(m)
		return
	}
	if d.Status == 1 && d.Node != g.node {
		g.send(context.Background(), d.Node, cluster.Event{Kind: cluster.KindWake, App: m.AppKey, Device: m.DeviceName})
	}
}

// tell sends an event to the other node that holds the device, as its
// presence entry says now. Nothing is sent for a device that is offline or
// held here: its next subscription reads the store anyway.
func (g *API) tell(ctx context.Context, appKey, device, kind string) {
	if g.peers == nil {
		return
	}
	d, err := g.store.GetDevice(ctx, appKey, device)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			g.log.Error("find the node of a device", "app", appKey, "device", device, "err", err)
		}
		return
	}
	if d.Status != 1 || d.Node == g.node {
		return
	}
	g.send(ctx, d.Node, cluster.Event{Kind: kind, App: appKey, Device: device})
}

// send publishes ev to a node; a lost event only delays (see Resync).
func (g *API) send(ctx context.Context, node int, ev cluster.Event) {
	if err := g.peers.Send(ctx, node, ev); err != nil {
		g.log.Error("tell another node", "node_id", node, "event", ev.Kind, "app", ev.App, "device", ev.Device, "err", err)
	}
}

// HandleEvent acts on what another node asks of this one.
func (g *API) HandleEvent(ctx context.Context, ev cluster.Event) {
	switch ev.Kind {
	case cluster.KindWake:
		g.dispatch.Wake(ev.App, ev.Device)
	case cluster.KindCommand, cluster.KindCommandCancel, cluster.KindCommandDone:
		g.commandEvent(ctx, ev)
	case cluster.KindNodeGone:
		if int(ev.ID) != g.node { // this node's own start: its subscription resyncs it
			go g.Resync(false) // reads the store per device: off the event loop
		}
	case cluster.KindDesired:
		s := g.broker.Session(ev.App, ev.Device)
		if s == nil {
			return
		}
		go func() {
			// Read and push under the device's lock, so two changes in a
			// row reach the device in order.
			// SendDesired sends only what is durable (store.Store.Barrier).
			defer g.lock(ev.App, ev.Device)()
			g.sync.SendDesired(ctx, s, ev.App, ev.Device, false)
		}()
	case cluster.KindKick:
		s := g.broker.Session(ev.App, ev.Device)
		switch {
		case s == nil:
		case ev.Conn == "":
			go s.Close() // writes to the device: off the event loop
		case ev.Conn == g.connID(s):
			go s.TakenOver()
		}
	default:
		g.log.Warn("unknown cluster event", "event", ev.Kind)
	}
}

// Resync makes up for events that did not arrive: it closes the
// connections here that the store says were disabled or taken over
// elsewhere, sends every subscribed device what is pending for it and,
// after a lost subscription, the desired document too, and wakes the
// calls waiting for commands that ended elsewhere.
func (g *API) Resync(resubscribed bool) {
	ctx := context.Background()
	for _, s := range g.broker.Sessions() {
		if _, ok := g.recorded.Load(s); !ok {
			continue // its login is being recorded right now
		}
		d, err := g.store.GetDevice(ctx, s.AppKey, s.DeviceName)
		// Closing writes to the device: never wait on one here.
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && d.Flag != store.FlagEnabled:
			go s.Close()
			continue
		case err != nil:
			continue
		case d.Status == 1 && d.Conn != g.connID(s) && s.Live():
			go s.TakenOver()
			continue
		}
		if g.cmds != nil && s.Subscribed(command.TopicCmd) {
			go g.cmds.Attach(ctx, s, s.AppKey, s.DeviceName, true)
		}
		if resubscribed && s.Subscribed(shadow.TopicDesired) {
			// Under the device's lock, as pushes from events are.
			unlock := g.lock(s.AppKey, s.DeviceName)
			g.sync.SendDesired(ctx, s, s.AppKey, s.DeviceName, true)
			unlock()
		}
	}
	g.dispatch.WakeAll()
	if g.commands != nil {
		g.commands.Recheck(ctx)
	}
}

// Reassert marks the devices connected here online again, unless another
// node holds one now: that connection here is stale and is closed.
func (g *API) Reassert(ctx context.Context) {
	for _, s := range g.broker.Sessions() {
		c := g.conn(s)
		unlock := g.lock(s.AppKey, s.DeviceName)
		if _, ok := g.recorded.Load(s); !ok || !s.Live() || !s.Current() {
			// Gone meanwhile (its logout stands), or its login is not
			// recorded yet (Connected decides it).
			unlock()
			continue
		}
		_, err := g.store.UpdateDevice(ctx, s.AppKey, s.DeviceName, func(d *store.Device) error {
			// Marked offline (node_lost) while this node looked dead:
			// online again, and said so.
			return g.presence.Reassert(d, c, g.now())
		})
		unlock()
		if err != nil && !errors.Is(err, presence.ErrUnchanged) && !errors.Is(err, store.ErrNotFound) {
			g.log.Error("mark a device online again", "app", s.AppKey, "device", s.DeviceName, "err", err)
		}
		if errors.Is(err, presence.ErrHeldElsewhere) {
			go s.TakenOver()
		}
	}
	// Events for these devices went nowhere while they looked offline.
	g.Resync(true)
}
