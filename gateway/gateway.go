package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Service topics: what the service publishes under a device's prefix.
var ServiceTopics = []string{message.TopicMsg, shadow.TopicDesired, shadow.TopicReportReply}

// Topics a device publishes to.
const TopicClick = "msg/click"

// stripes serialise presence writes per device (see Connected).
const stripes = 256

// Gateway implements broker.Handler.
type Gateway struct {
	store    store.Store
	dispatch *message.Dispatcher
	sync     *shadow.Sync
	log      *slog.Logger
	now      func() time.Time
	broker   *broker.Broker

	locks [stripes]sync.Mutex
}

var _ broker.Handler = (*Gateway)(nil)

// New returns a Gateway; SetBroker must be called before devices connect.
func New(st store.Store, d *message.Dispatcher, sy *shadow.Sync, log *slog.Logger) *Gateway {
	return &Gateway{store: st, dispatch: d, sync: sy, log: log, now: time.Now}
}

// SetBroker gives the gateway the broker whose sessions it serves (the
// broker needs the gateway first, as its Handler).
func (g *Gateway) SetBroker(b *broker.Broker) { g.broker = b }

func (g *Gateway) lock(app, dev string) func() {
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

// Authenticate admits an enabled device of the app with its secret.
func (g *Gateway) Authenticate(appKey, device, sec string) error {
	d, err := g.store.GetDevice(context.Background(), appKey, device)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			g.log.Error("authenticate device", "app", appKey, "device", device, "err", err)
		}
		return broker.ErrNotAuthorized
	}
	if !secret.Equal(d.Secret, sec) || d.Flag != store.FlagEnabled {
		return broker.ErrNotAuthorized
	}
	return nil
}

// Connected marks the device online. Presence writes of one device are
// serialised and Disconnected writes only for the current session, so
// whatever order a takeover's events arrive in, the device ends online.
func (g *Gateway) Connected(s *broker.Session) {
	defer g.lock(s.AppKey, s.DeviceName)()
	now := g.now().Unix()
	_, err := g.store.UpdateDevice(context.Background(), s.AppKey, s.DeviceName, func(d *store.Device) error {
		d.Status, d.ClientIP, d.LastLoginTime = 1, s.RemoteIP, now
		if d.TimeActive == 0 {
			d.TimeActive = now
		}
		return nil
	})
	if err != nil {
		g.log.Error("record login", "app", s.AppKey, "device", s.DeviceName, "err", err)
	}
}

// Disconnected marks the device offline unless a newer session holds it.
func (g *Gateway) Disconnected(s *broker.Session) {
	g.dispatch.Detach(s, s.AppKey, s.DeviceName)
	defer g.lock(s.AppKey, s.DeviceName)()
	if !s.Current() {
		return // taken over: the newer session's login stands
	}
	now := g.now().Unix()
	_, err := g.store.UpdateDevice(context.Background(), s.AppKey, s.DeviceName, func(d *store.Device) error {
		d.Status, d.LastLogoutTime = 0, now
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		g.log.Error("record logout", "app", s.AppKey, "device", s.DeviceName, "err", err)
	}
}

// Subscribed starts message delivery or sends the desired document.
func (g *Gateway) Subscribed(s *broker.Session, topic string) {
	switch topic {
	case message.TopicMsg:
		g.dispatch.Attach(s, s.AppKey, s.DeviceName)
	case shadow.TopicDesired:
		g.sync.SendDesired(context.Background(), s, s.AppKey, s.DeviceName, true)
	}
}

// Unsubscribed stops message delivery when the device drops its last
// subscription to msg; what was sent and not acknowledged is sent again
// when it subscribes anew.
func (g *Gateway) Unsubscribed(s *broker.Session, topic string) {
	if topic == message.TopicMsg {
		g.dispatch.Detach(s, s.AppKey, s.DeviceName)
	}
}

// Published routes what a device sends.
func (g *Gateway) Published(s *broker.Session, topic string, payload []byte) {
	ctx := context.Background()
	switch topic {
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
			return
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
			return
		}
		g.sync.Report(ctx, s, app, s.DeviceName, payload)
	default:
		g.log.Debug("publish to an unknown topic", "app", s.AppKey, "device", s.DeviceName, "topic", topic)
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

// Acked passes a PUBACK to message delivery.
func (g *Gateway) Acked(s *broker.Session, pid uint16) {
	g.dispatch.Acked(s, s.AppKey, s.DeviceName, pid)
}

// DesiredChanged pushes a new desired document to the connected device.
func (g *Gateway) DesiredChanged(_ context.Context, appKey, device string, sh store.Shadow) {
	if s := g.broker.Session(appKey, device); s != nil {
		g.sync.Push(s, sh)
	}
}

// Disabled disconnects the device and fails its pending messages (5/3003).
func (g *Gateway) Disabled(ctx context.Context, appKey, device string) {
	g.broker.Kick(appKey, device)
	if err := g.dispatch.FailPending(ctx, appKey, device, message.ErrCodeDeviceDisabled, "device disabled"); err != nil {
		g.log.Error("fail pending messages of a disabled device", "app", appKey, "device", device, "err", err)
	}
}

// Deleted disconnects a device that is about to be deleted and fails its
// pending messages (5/3007). The device is already disabled, so it cannot
// connect again meanwhile. An error leaves messages pending, and the
// caller does not delete the device then: its queue would be lost.
func (g *Gateway) Deleted(ctx context.Context, appKey, device string) error {
	g.broker.Kick(appKey, device)
	if err := g.dispatch.FailPending(ctx, appKey, device, message.ErrCodeDeviceDeleted, "device deleted"); err != nil {
		return fmt.Errorf("fail pending messages of %s/%s: %w", appKey, device, err)
	}
	return nil
}
