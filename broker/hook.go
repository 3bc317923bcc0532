package broker

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// hook connects mochi's events to the Broker.
type hook struct {
	mqtt.HookBase
	b *Broker
}

func (h *hook) ID() string { return "devmsg" }

func (h *hook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect,
		mqtt.OnConnectAuthenticate,
		mqtt.OnACLCheck,
		mqtt.OnSessionEstablished,
		mqtt.OnDisconnect,
		mqtt.OnSubscribe,
		mqtt.OnSubscribed,
		mqtt.OnPacketProcessed,
		mqtt.OnUnsubscribed,
		mqtt.OnPublish,
		mqtt.OnPacketRead:
		return true
	}
	return false
}

// OnConnect authenticates. Refusals are answered here rather than in
// OnConnectAuthenticate, whose CONNACK says "bad username or password":
// a refused device gets "not authorized" (3.1.1: 5, v5: 0x87), as
// docs/device-protocol.md ("Connecting") promises.
// A login over a failure budget (throttle.go) is refused the same way,
// unchecked.
func (h *hook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	user := string(pk.Connect.Username)
	app, dev, ok := parseUsername(user)
	if !h.b.logins.Allowed(cl.Net.Remote, user) {
		h.b.throttled.Add(1)
		return h.refuse(cl)
	}
	if !ok || h.b.handler.Authenticate(app, dev, string(pk.Connect.Password)) != nil {
		h.b.logins.Failed(cl.Net.Remote, user)
		return h.refuse(cl)
	}
	h.b.logins.Succeeded(cl.Net.Remote, user)
	// Every session is clean: the service keeps what must survive a
	// disconnect (the pending queue) itself, and a broker-side session
	// of a device that is gone would only hold memory.
	cl.Properties.Clean = true
	cl.Properties.Props.SessionExpiryInterval = 0
	// mochi keys its clients by client id and disconnects an older client
	// with the id of a new one, whoever it belongs to. The id is the
	// device's free choice, so a device of another app could pick it and
	// kick this one. mochi gets an id of our own instead, unique to this
	// connection, and the one-connection-per-device rule is kept by
	// device identity alone (OnSessionEstablished). The client's own id
	// stays in Session.ClientID; an id mochi assigned to an empty one
	// still goes back in the v5 CONNACK (Props.AssignedClientID).
	cl.ID = deviceKey(app, dev) + "#" + strconv.FormatUint(h.b.nextConn.Add(1), 10)
	// A will would be published by mochi straight to subscribers, past
	// OnPublish and the ACL: a device could inject into any device's
	// topics. Devices talk to the service only, so wills are dropped.
	cl.Properties.Will = mqtt.Will{}
	return nil
}

// refuse answers CONNACK "not authorized" and ends the connection.
func (h *hook) refuse(cl *mqtt.Client) error {
	code := packets.ErrNotAuthorized // v5: 0x87
	if cl.Properties.ProtocolVersion < 5 {
		// mochi maps this one, and not ErrNotAuthorized, to the 3.1.1
		// return code 5, "not authorized".
		code = packets.ErrBadUsernameOrPassword
	}
	_ = h.b.server.SendConnack(cl, code, false, nil)
	return packets.ErrNotAuthorized
}

func (h *hook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

// OnACLCheck confines a device to topics under d/{app_key}/{device_name}/,
// and its subscriptions to MaxSubscriptions filters and the subscribe rate.
// A shared subscription ($share/...) lies outside the prefix. mochi asks
// with write false for each filter of a SUBSCRIBE, after adding the ones
// before it, so the count below is exact (and for fan-out to subscribers,
// which never happens here: devices' publishes and wills reach no one).
func (h *hook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	app, dev, ok := parseUsername(string(cl.Properties.Username))
	if !ok || !ownTopic(app, dev, topic) {
		if write {
			h.b.refusals.warn(app, dev, topic, "outside the device's topics d/"+app+"/"+dev+"/...")
		} else {
			h.b.subRefusedTopic.Add(1)
		}
		return false
	}
	if write {
		return true
	}
	s := h.session(cl)
	if s == nil {
		return false
	}
	_, again := cl.State.Subscriptions.Get(topic) // replaces the one held
	switch {
	case s.subThrottled.Load():
		h.b.subRefusedRate.Add(1)
		return false
	case !again && cl.State.Subscriptions.Len() >= MaxSubscriptions:
		h.b.subRefusedLimit.Add(1)
		return false
	}
	return true
}

// ownTopic reports whether topic (or filter) lies under the device's prefix.
func ownTopic(app, dev, topic string) bool {
	prefix := TopicPrefix + app + "/" + dev + "/"
	return strings.HasPrefix(topic, prefix) && len(topic) > len(prefix)
}

// OnSubscribe takes a token for the SUBSCRIBE; without one, OnACLCheck
// refuses all its filters.
func (h *hook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if s := h.session(cl); s != nil {
		s.subThrottled.Store(!s.subLimiter.Allow())
	}
	return pk
}

// OnSessionEstablished makes the session the device's current one and
// disconnects any older one (takeover). Doing this after the CONNACK, not
// in OnConnect, means a connection that fails before it is accepted
// never displaces a working one.
//
// Two connections of one device establish one at a time, each reported
// (Handler.Connected) before the next replaces it: the handler sees
// logins in the order the sessions became current, so a slow report of
// an older session cannot land after a newer one's. The newer is the one
// accepted later (the greater Session.ID, numbered in OnConnect): mochi
// calls this hook after writing the CONNACK, so a device that connects
// again as soon as it has one can have its new connection here first.
// An older one that comes second is never reported, only closed.
func (h *hook) OnSessionEstablished(cl *mqtt.Client, pk packets.Packet) {
	if testBeforeEstablished != nil {
		testBeforeEstablished(cl)
	}
	app, dev, _ := parseUsername(string(cl.Properties.Username))
	clientID := pk.Connect.ClientIdentifier
	if clientID == "" {
		clientID = cl.Properties.Props.AssignedClientID
	}
	s := newSession(h.b, cl, connNumber(cl.ID), app, dev, clientID)
	k := deviceKey(app, dev)
	order := h.b.establishing(k)
	order.Lock()
	defer order.Unlock()
	h.b.mu.Lock()
	old := h.b.devices[k]
	if old != nil && old.ID > s.ID {
		// A newer connection of the device got here first, while this
		// one waited: this one is the older, already taken over. (The
		// mutex wakes waiters in no set order.)
		h.b.mu.Unlock()
		h.b.disconnect(cl, packets.ErrSessionTakenOver)
		return
	}
	h.b.devices[k] = s
	h.b.sessions[cl] = s
	h.b.mu.Unlock()
	h.b.connected.Add(1)
	if old != nil && old.cl != cl {
		h.b.disconnect(old.cl, packets.ErrSessionTakenOver)
	}
	h.b.handler.Connected(s)
}

// testBeforeEstablished, set by tests, runs first in
// OnSessionEstablished: it holds a connection there after its CONNACK.
var testBeforeEstablished func(cl *mqtt.Client)

// connNumber is the number OnConnect gave the connection, from the client
// id it set.
func connNumber(id string) uint64 {
	n, _ := strconv.ParseUint(id[strings.LastIndexByte(id, '#')+1:], 10, 64)
	return n
}

func (h *hook) OnDisconnect(cl *mqtt.Client, err error, _ bool) {
	h.b.mu.Lock()
	s := h.b.sessions[cl]
	delete(h.b.sessions, cl)
	h.b.mu.Unlock()
	if s == nil {
		return // refused before it was established
	}
	end := endOf(err, cl.StopCause())
	if end == EndKicked && !s.kicked.Load() {
		end = EndError // mochi's own "not authorized", not a kick
	}
	s.end.Store(int32(end))
	h.b.connected.Add(-1)
	// Report first, while Current still answers true for a session that
	// was not taken over, then retire it.
	h.b.handler.Disconnected(s)
	h.b.mu.Lock()
	if k := deviceKey(s.AppKey, s.DeviceName); h.b.devices[k] == s {
		delete(h.b.devices, k)
	}
	h.b.mu.Unlock()
}

func (h *hook) session(cl *mqtt.Client) *Session {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	return h.b.sessions[cl]
}

// OnSubscribed reports the service topics a SUBSCRIBE matched. mochi
// calls it before writing the SUBACK, so the handler's state (message
// delivery started, for one) is in place when the device learns it is
// subscribed; what the handler publishes in answer is held back until
// the SUBACK is written (OnPacketProcessed), as clients expect.
//
// For MQTT 5 it also says why a filter was refused: mochi answers every
// refusal of OnACLCheck with 0x87 (not authorized), and writes the SUBACK
// from the codes slice it passes here. A filter of the device's own that
// was refused was over a limit (0x97, quota exceeded); a shared one gets
// 0x9E (shared subscriptions not supported). MQTT 3.1.1 has only 0x80.
func (h *hook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	s := h.session(cl)
	if s == nil {
		return
	}
	if cl.Properties.ProtocolVersion >= 5 {
		for i, f := range pk.Filters {
			switch {
			case i >= len(codes) || codes[i] != packets.ErrNotAuthorized.Code:
			case mqtt.IsSharedFilter(f.Filter):
				codes[i] = packets.ErrSharedSubscriptionsNotSupported.Code
			case ownTopic(s.AppKey, s.DeviceName, f.Filter):
				codes[i] = packets.ErrQuotaExceeded.Code
			}
		}
	}
	s.hold()
	var matched []string
	for i, f := range pk.Filters {
		if i < len(codes) && codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		matched = append(matched, s.subscribe(f.Filter)...)
	}
	// Once each, in the order of Config.ServiceTopics, whatever the
	// order of the filters.
	for _, t := range h.b.cfg.ServiceTopics {
		if slices.Contains(matched, t) {
			h.b.handler.Subscribed(s, t)
		}
	}
}

func (h *hook) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	if pk.FixedHeader.Type != packets.Subscribe {
		return
	}
	if s := h.session(cl); s != nil {
		s.release()
	}
}

func (h *hook) OnUnsubscribed(cl *mqtt.Client, _ packets.Packet) {
	if s := h.session(cl); s != nil {
		for _, t := range s.resync() {
			h.b.handler.Unsubscribed(s, t)
		}
	}
}

// OnPublish hands a device's publish to the handler and stops it there:
// devices talk to the service, never to each other. mochi calls it from
// the connection's read loop and writes the PUBACK of a QoS 1 publish
// after it returns, so the PUBACK waits for the handler: the publish is
// acknowledged (CodeSuccessIgnore: delivered to no subscriber) when the
// handler accepts it, and refused when the handler, or the device's
// publish rate, does not (see refuse). What is written to the device
// meanwhile goes out with the PUBACK (Session.reading).
func (h *hook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	s := h.session(cl)
	if s == nil || !strings.HasPrefix(pk.TopicName, s.prefix) {
		return pk, packets.CodeSuccessIgnore
	}
	topic := pk.TopicName[len(s.prefix):]
	if lim := s.publishLimiter(topic); !lim.Allow() {
		reason := "over the device's publish rate"
		if lim == s.answers {
			reason = "over the device's answer rate"
		}
		h.b.refusedRate.Add(1)
		h.b.refusals.warn(s.AppKey, s.DeviceName, topic, reason)
		return pk, refuse(cl, pk, packets.ErrQuotaExceeded)
	}
	s.setReading(true)
	var err error
	if ch, ok := h.b.handler.(CorrelatedHandler); ok {
		err = ch.PublishedCorrelated(s, topic, pk.FixedHeader.Qos, pk.Payload, pk.Properties.CorrelationData)
	} else {
		err = h.b.handler.Published(s, topic, pk.FixedHeader.Qos, pk.Payload)
	}
	s.setReading(false)
	if err != nil {
		h.b.refusals.warn(s.AppKey, s.DeviceName, topic, err.Error())
	}
	switch {
	case err == nil:
		return pk, packets.CodeSuccessIgnore
	case errors.Is(err, ErrQuota):
		h.b.refusedQuota.Add(1)
		return pk, refuse(cl, pk, packets.ErrQuotaExceeded)
	case errors.Is(err, ErrMalformed):
		h.b.refusedMalformed.Add(1)
		return pk, refuse(cl, pk, packets.ErrPayloadFormatInvalid)
	case errors.Is(err, ErrTopic):
		h.b.refusedTopic.Add(1)
		return pk, refuse(cl, pk, packets.ErrTopicNameInvalid)
	default:
		h.b.refusedFailed.Add(1)
		return pk, refuse(cl, pk, packets.ErrUnspecifiedError)
	}
}

// refuse is what OnPublish returns to refuse pk: an MQTT 5 QoS 1 publish
// gets a PUBACK with the reason code; anything else gets no answer
// (ErrRejectPacket), as MQTT 3.1.1 cannot refuse a publish and QoS 0 has
// no acknowledgement. Either way mochi delivers it to no subscriber.
func refuse(cl *mqtt.Client, pk packets.Packet, code packets.Code) error {
	if cl.Properties.ProtocolVersion >= 5 && pk.FixedHeader.Qos > 0 {
		return code
	}
	return packets.ErrRejectPacket
}

// OnPacketRead correlates PUBACKs with Session.Publish, after the place
// a PUBACK frees went to a waiting Session.PublishControl. mochi's own
// inflight tracking is not used: the service's queue is the record.
func (h *hook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Puback {
		if s := h.session(cl); s != nil && s.acked(pk.PacketID) {
			h.b.handler.Acked(s, pk.PacketID)
		}
	}
	return pk, nil
}
