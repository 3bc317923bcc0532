package broker

import (
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/time/rate"
)

// WriteTimeout bounds one write to a device unless Config.WriteTimeout
// sets another bound.
const WriteTimeout = 10 * time.Second

// ErrNoPacketID means every packet id of a session is waiting for a PUBACK.
var ErrNoPacketID = errors.New("no free packet id: 65535 publishes await PUBACK")

// Session is one live connection of a device.
type Session struct {
	// ID is unique among the sessions of this broker, and orders them
	// as they were accepted: taken in OnConnect, before the CONNACK, so
	// a connection made after another's CONNACK has the greater ID.
	ID         uint64
	AppKey     string
	DeviceName string
	// ClientID is the client id the device sent, or the one the broker
	// assigned when it sent none. It identifies nothing: the broker keys
	// connections by device (see hook.OnConnect).
	ClientID string
	// RemoteIP is the device's address without the port.
	RemoteIP string
	// ProtocolVersion is the MQTT version of the connection: 4 (3.1.1)
	// or 5 (3 for MQTT 3.1).
	ProtocolVersion byte
	// Transport is the listener the device came through: "tcp", "tls"
	// or "ws".
	Transport string
	// Since is when the broker accepted the session.
	Since time.Time

	b      *Broker
	cl     *mqtt.Client
	end    atomic.Int32 // an End, set before Handler.Disconnected
	prefix string       // d/{app}/{device}/
	// lastTopic is the last topic published on, with the prefix
	// (topicName).
	lastTopic atomic.Pointer[topicNamed]
	limiter   *rate.Limiter
	// answers limits the publishes on Config.AnswerTopics; made at the
	// first, so a device that answers nothing does not pay for it. Only
	// the connection's read loop (hook.OnPublish) uses either limiter.
	answers *rate.Limiter
	// subLimiter limits SUBSCRIBEs; subThrottled says the one being
	// processed is over it (set by hook.OnSubscribe).
	subLimiter   *rate.Limiter
	subThrottled atomic.Bool
	// kicked says Kick or Close stopped the connection: mochi's own
	// refusals (a 3.1.1 publish outside the prefix) stop it with the
	// same "not authorized" cause, and those are the device's error.
	kicked atomic.Bool

	mu      sync.Mutex
	nextPID uint16
	// awaiting holds the packet ids of QoS 1 publishes not yet acknowledged.
	awaiting map[uint16]struct{}
	// waitingRequests counts the requests that found the window full
	// and wait for a place (PublishRequestWithin): while there is one,
	// PublishWithin sends nothing.
	waitingRequests int
	// uncounted holds the awaited packet ids that hold no place in the
	// window any more (Uncount).
	uncounted map[uint16]struct{}
	// control holds the publishes of PublishControl that wait for a
	// place in the device's Receive Maximum, in order, without packet ids.
	control []packets.Packet
	// subscribed holds the service topics the device subscribed to.
	subscribed map[string]bool

	// wmu orders writes to the device; while holding, publishes queue in
	// held instead (see hook.OnSubscribed).
	wmu     sync.Mutex
	holding bool
	held    []packets.Packet
	// reading says the device's publish is being processed (see
	// hook.OnPublish): writes wait in mochi's write buffer and go out
	// with its PUBACK, or when the reader's burst ends if none follows,
	// so a command sent as the device answers the one before shares the
	// PUBACK's write(2).
	reading bool
}

func newSession(b *Broker, cl *mqtt.Client, id uint64, appKey, device, clientID string) *Session {
	ip := cl.Net.Remote
	if h, _, err := net.SplitHostPort(ip); err == nil {
		ip = h
	}
	return &Session{
		ID:         id,
		AppKey:     appKey,
		DeviceName: device,
		ClientID:   clientID,
		RemoteIP:   ip,
		// mochi names the listener by the id Start gave it.
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Transport:       cl.Net.Listener,
		Since:           time.Now(),
		b:               b,
		cl:              cl,
		prefix:          TopicPrefix + appKey + "/" + device + "/",
		limiter:         rate.NewLimiter(rate.Limit(b.cfg.PublishRate), b.cfg.PublishBurst),
		subLimiter:      rate.NewLimiter(rate.Limit(b.cfg.SubscribeRate), b.cfg.SubscribeBurst),
	}
}

// Current reports whether s is still the device's live session: false
// once it has been taken over by a newer one or has disconnected.
func (s *Session) Current() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.devices[deviceKey(s.AppKey, s.DeviceName)] == s
}

// Subscribed reports whether the device holds a subscription matching the
// service topic (one of Config.ServiceTopics).
func (s *Session) Subscribed(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subscribed[topic]
}

// Publish sends payload to the device on topic (relative to its prefix).
// At QoS 1 it returns the packet id that the device's PUBACK will carry
// (reported by Handler.Acked); the broker keeps no copy, so redelivery is
// the caller's business.
func (s *Session) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	var id [1]uint16 // on the stack: one delivery costs no id slice
	payloads := [1][]byte{payload}
	ids, err := s.publish(id[:0], topic, payloads[:], qos, 0)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return ids[0], nil
}

// PublishRequest is Publish at QoS 1 of a request the device answers:
// to an MQTT 5 device it also sets Response Topic (responseTopic, relative
// to the device's prefix) and Correlation Data; to an MQTT 3.1.1 device,
// which has neither, it is Publish.
func (s *Session) PublishRequest(topic string, payload []byte, responseTopic string, correlation []byte) (uint16, error) {
	id, err := s.takePacketID()
	if err != nil {
		return 0, err
	}
	return id, s.writeRequest(id, topic, payload, responseTopic, correlation)
}

// PublishRequestWithin is PublishRequest within a window of limit QoS 1
// publishes unacknowledged (MQTT 5's Receive Maximum), in which requests
// go ahead of PublishWithin: sent false, with nothing sent, when the
// window is full. A request that finds it full waits for a place unless
// waited says it is one that waits already: while one waits,
// PublishWithin sends nothing, so the next free place is the request's,
// until it is sent with waited set or given up (UnwaitRequest).
// Requests that wait take places in the order the caller sends them,
// behind any publish of PublishControl waiting for one.
func (s *Session) PublishRequestWithin(limit int, waited bool, topic string, payload []byte, responseTopic string, correlation []byte) (id uint16, sent bool, err error) {
	s.mu.Lock()
	if s.inWindow() >= limit || len(s.control) > 0 {
		if !waited {
			s.waitingRequests++
		}
		s.mu.Unlock()
		return 0, false, nil
	}
	id, err = s.nextPacketID()
	if err == nil && waited {
		s.waitingRequests--
	}
	s.mu.Unlock()
	if err != nil {
		return 0, false, err
	}
	return id, true, s.writeRequest(id, topic, payload, responseTopic, correlation)
}

// WaitRequest counts one more request waiting for a place in the window
// (see PublishRequestWithin): one that queues behind requests that wait
// already, without trying for a place of its own.
func (s *Session) WaitRequest() {
	s.mu.Lock()
	s.waitingRequests++
	s.mu.Unlock()
}

// UnwaitRequest gives up a request that waited for a place in the window.
func (s *Session) UnwaitRequest() {
	s.mu.Lock()
	s.waitingRequests = max(0, s.waitingRequests-1)
	s.mu.Unlock()
}

// Uncount stops counting packet id, still awaiting its PUBACK, in the
// window of PublishWithin and PublishRequestWithin: the caller gave up
// its publish (a message that expired unacknowledged) and the device
// declared no Receive Maximum that would still count it.
func (s *Session) Uncount(id uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.awaiting[id]; !ok {
		return
	}
	if s.uncounted == nil {
		s.uncounted = map[uint16]struct{}{}
	}
	s.uncounted[id] = struct{}{}
}

// inWindow is how many publishes hold places in the window; the caller
// holds s.mu.
func (s *Session) inWindow() int { return len(s.awaiting) - len(s.uncounted) }

// writeRequest writes a request with packet id id, taken already.
func (s *Session) writeRequest(id uint16, topic string, payload []byte, responseTopic string, correlation []byte) error {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   s.prefix + topic,
		Payload:     payload,
		PacketID:    id,
	}
	if s.ProtocolVersion >= 5 {
		pk.Properties.ResponseTopic = s.prefix + responseTopic
		pk.Properties.CorrelationData = correlation
	}
	return s.writeOrHold([]packets.Packet{pk})
}

// ReceiveMaximum is how many QoS 1 publishes the device takes
// unacknowledged at once, as its MQTT 5 CONNECT declared (Receive
// Maximum, at most the broker's inflight limit); 0 when it declared
// none, as MQTT 3.1.1 cannot.
func (s *Session) ReceiveMaximum() int { return int(s.cl.Properties.Props.ReceiveMaximum) }

// PublishAll is Publish for several payloads, sent in order with one
// write (while they fit mochi's write buffer), and returns their packet
// ids at QoS 1: a device's waiting messages cost one write(2), not one
// each. On an error none of them was sent.
func (s *Session) PublishAll(topic string, payloads [][]byte, qos byte) ([]uint16, error) {
	var ids []uint16
	if qos > 0 {
		ids = make([]uint16, 0, len(payloads))
	}
	return s.publish(ids, topic, payloads, qos, 0)
}

// PublishWithin is PublishAll at QoS 1 within a window of limit QoS 1
// publishes unacknowledged (MQTT 5's Receive Maximum), behind the
// requests that wait for a place (PublishRequestWithin) and the
// publishes of PublishControl: it sends the payloads that fit, in
// order, and returns their packet ids, fewer than the payloads (none
// while a request or a control publish waits) when the window is full.
func (s *Session) PublishWithin(limit int, topic string, payloads [][]byte) ([]uint16, error) {
	return s.publish(make([]uint16, 0, len(payloads)), topic, payloads, 1, limit)
}

// publish is PublishAll, appending the packet ids to ids; with limit
// above 0, only the payloads that fit in the window (PublishWithin).
func (s *Session) publish(ids []uint16, topic string, payloads [][]byte, qos byte, limit int) ([]uint16, error) {
	pksp := packetSlices.Get().(*[]packets.Packet)
	defer func() {
		clear(*pksp) // drop the payloads
		*pksp = (*pksp)[:0]
		packetSlices.Put(pksp)
	}()
	pks := slices.Grow(*pksp, len(payloads))[:len(payloads)]
	*pksp = pks
	name := s.topicName(topic)
	for i, p := range payloads {
		pks[i] = packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
			TopicName:   name,
			Payload:     p,
		}
		if qos > 0 {
			id, err := s.takePacketIDWithin(limit)
			if errors.Is(err, errWindowFull) {
				pks = pks[:i]
				break
			}
			if err != nil {
				for _, pk := range pks[:i] {
					s.releasePacketID(pk.PacketID)
				}
				return nil, err
			}
			pks[i].PacketID = id
			ids = append(ids, id)
		}
	}
	if len(pks) == 0 {
		return ids, nil
	}
	if err := s.writeOrHold(pks); err != nil {
		return nil, err
	}
	return ids, nil
}

// packetSlices holds PublishAll's packet slices for reuse: a packet is
// 800 bytes, and every delivery flush made a slice of them. Nothing
// keeps the slice past PublishAll (held copies the packets).
var packetSlices = sync.Pool{New: func() any { return new([]packets.Packet) }}

// topicNamed is a topic with the session's prefix.
type topicNamed struct{ topic, name string }

// topicName returns s.prefix+topic, kept for the topic asked last:
// deliveries publish on one topic, and the joined name was an
// allocation per flush.
func (s *Session) topicName(topic string) string {
	if t := s.lastTopic.Load(); t != nil && t.topic == topic {
		return t.name
	}
	t := &topicNamed{topic, s.prefix + topic}
	s.lastTopic.Store(t)
	return t.name
}

// writeOrHold sends pks in one write (writeAll), or queues them while
// the session holds its publishes (hold).
func (s *Session) writeOrHold(pks []packets.Packet) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.holding {
		s.held = append(s.held, pks...)
		return nil
	}
	return s.writeAll(pks)
}

// writeAll sends pks in one write, with the PUBACK that follows while
// reading; the caller holds wmu.
func (s *Session) writeAll(pks []packets.Packet) error {
	write := s.cl.WritePackets
	if s.reading {
		write = s.cl.HoldPackets
	}
	if err := write(pks); err != nil {
		s.writeFailed(err, pks...)
		return err
	}
	return nil
}

// writeFailed frees the packet ids of pks, which were not sent, and ends
// the connection: a failed or timed-out write leaves the stream unusable,
// so the device reconnects and is served afresh.
func (s *Session) writeFailed(err error, pks ...packets.Packet) {
	for _, pk := range pks {
		if pk.FixedHeader.Qos > 0 {
			s.releasePacketID(pk.PacketID)
		}
	}
	s.cl.Stop(err)
}

// hold makes publishes queue until release.
func (s *Session) hold() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.holding = true
}

// setReading marks whether a publish of the device is being processed
// (reading).
func (s *Session) setReading(r bool) {
	s.wmu.Lock()
	s.reading = r
	s.wmu.Unlock()
}

// release writes what was held, in order, and lets publishes through.
func (s *Session) release() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.holding = false
	if len(s.held) > 0 {
		_ = s.writeAll(s.held) // a failure ends the connection
	}
	s.held = nil
}

// Close disconnects the session.
func (s *Session) Close() {
	s.kicked.Store(true)
	s.b.disconnect(s.cl, packets.ErrNotAuthorized)
}

// Live reports whether the session's connection is still open: false
// from the moment the broker learns it ended, before Disconnected.
func (s *Session) Live() bool {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.b.sessions[s.cl] == s
}

// TakenOver ends the session because the device connected again
// elsewhere, telling an MQTT 5 client so ("session taken over").
func (s *Session) TakenOver() { s.b.disconnect(s.cl, packets.ErrSessionTakenOver) }

func (s *Session) takePacketID() (uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextPacketID()
}

// errWindowFull: the window of takePacketIDWithin is full.
var errWindowFull = errors.New("window full")

// takePacketIDWithin is takePacketID within a window of limit (0: none),
// and none while a request waits for a place.
func (s *Session) takePacketIDWithin(limit int) (uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit > 0 && (s.waitingRequests > 0 || len(s.control) > 0 || s.inWindow() >= limit) {
		return 0, errWindowFull
	}
	return s.nextPacketID()
}

// nextPacketID takes a free packet id; the caller holds s.mu.
func (s *Session) nextPacketID() (uint16, error) {
	if s.awaiting == nil {
		s.awaiting = make(map[uint16]struct{})
	}
	for range 65535 {
		s.nextPID++
		if s.nextPID == 0 {
			s.nextPID = 1
		}
		if _, busy := s.awaiting[s.nextPID]; !busy {
			s.awaiting[s.nextPID] = struct{}{}
			return s.nextPID, nil
		}
	}
	return 0, ErrNoPacketID
}

// releasePacketID frees id and reports whether it was awaiting a PUBACK.
func (s *Session) releasePacketID(id uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.awaiting[id]; !ok {
		return false
	}
	delete(s.awaiting, id)
	if _, ok := s.uncounted[id]; ok {
		delete(s.uncounted, id)
		if len(s.uncounted) == 0 {
			s.uncounted = nil
		}
	}
	return true
}

// subscribe records the service topics that filter matches and returns them.
func (s *Session) subscribe(filter string) []string {
	var matched []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.b.cfg.ServiceTopics {
		if matchFilter(filter, s.prefix+t) {
			if s.subscribed == nil {
				s.subscribed = make(map[string]bool)
			}
			s.subscribed[t] = true
			matched = append(matched, t)
		}
	}
	return matched
}

// resync recomputes the subscribed service topics from the client's
// remaining subscriptions (after UNSUBSCRIBE) and returns those that
// lost their last matching subscription.
func (s *Session) resync() (lost []string) {
	filters := s.cl.State.Subscriptions.GetAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.b.cfg.ServiceTopics {
		if !s.subscribed[t] {
			continue
		}
		still := false
		for f := range filters {
			if matchFilter(f, s.prefix+t) {
				still = true
				break
			}
		}
		if !still {
			delete(s.subscribed, t)
			lost = append(lost, t)
		}
	}
	return lost
}

// matchFilter reports whether the MQTT topic filter matches topic.
func matchFilter(filter, topic string) bool {
	for {
		f, frest, fmore := cut(filter)
		t, trest, tmore := cut(topic)
		switch {
		case f == "#":
			return true
		case f != "+" && f != t:
			return false
		case !fmore && !tmore:
			return true
		case !fmore || !tmore:
			// "a/#" also matches "a" itself.
			return !tmore && frest == "#"
		}
		filter, topic = frest, trest
	}
}

func cut(s string) (head, rest string, more bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// publishLimiter returns the limiter a publish on topic (under the
// device's prefix) counts against: the answer limiter for an answer
// topic, else the publish rate's. Called from the read loop only.
func (s *Session) publishLimiter(topic string) *rate.Limiter {
	if !slices.Contains(s.b.cfg.AnswerTopics, topic) {
		return s.limiter
	}
	if s.answers == nil {
		s.answers = rate.NewLimiter(rate.Limit(s.b.cfg.AnswerRate), s.b.cfg.AnswerBurst)
	}
	return s.answers
}
