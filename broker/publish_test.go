package broker

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// pubHandler refuses publishes by topic and records the accepted ones and
// the sessions that ended.
type pubHandler struct {
	fakeHandler
	// refuse maps a topic to the error Published returns for it.
	refuse map[string]error
	// entered and gate, when set, hold Published: it signals entered and
	// waits for gate to close.
	entered, gate chan struct{}
	ended         chan *Session

	mu       sync.Mutex
	accepted []string // "topic qos payload"
}

func (h *pubHandler) Published(_ *Session, topic string, qos byte, payload []byte) error {
	if h.gate != nil {
		h.entered <- struct{}{}
		<-h.gate
	}
	if err := h.refuse[topic]; err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.accepted = append(h.accepted, fmt.Sprintf("%s %d %s", topic, qos, payload))
	return nil
}

func (h *pubHandler) Disconnected(s *Session) {
	if h.ended != nil {
		h.ended <- s
	}
}

func (h *pubHandler) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.accepted...)
}

// publish sends a PUBLISH to the topic under the device's prefix d/app/dev/.
func (rc *rawClient) publish(topic string, qos byte, payload string) uint16 {
	rc.t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, ProtocolVersion: rc.version,
		TopicName: "d/app/dev/" + topic, Payload: []byte(payload)}
	if qos > 0 {
		rc.nextID++
		pk.PacketID = rc.nextID
	}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		rc.t.Fatal(err)
	}
	rc.write(buf.Bytes())
	return pk.PacketID
}

// ping sends PINGREQ and reads the PINGRESP: mochi answers packets in
// order, so a PUBACK of a publish sent before would have come first.
func (rc *rawClient) ping() {
	rc.t.Helper()
	rc.write([]byte{packets.Pingreq << 4, 0})
	rc.read(packets.Pingresp)
}

// TestPublishRefusals: a publish the handler refuses gets a v5 PUBACK with
// the reason code of the refusal (0x97, 0x99, 0x90, 0x80), and no PUBACK at all
// in MQTT 3.1.1 or at QoS 0; an accepted one is acknowledged with the
// QoS passed through. The connection stays open either way.
func TestPublishRefusals(t *testing.T) {
	h := &pubHandler{refuse: map[string]error{
		"quota":     fmt.Errorf("store full: %w", ErrQuota),
		"malformed": fmt.Errorf("bad report: %w", ErrMalformed),
		"fail":      errors.New("store down"),
		"nowhere":   fmt.Errorf("no such topic: %w", ErrTopic),
	}}
	b, addr := startBroker(t, Config{}, h)
	for _, version := range []byte{4, 5} {
		rc, code := rawConnect(t, addr, version, "app/dev", "secret")
		if code != 0 {
			t.Fatalf("v%d CONNACK %#x", version, code)
		}
		for _, c := range []struct {
			topic string
			want  byte // v5 reason code; 0xff: no PUBACK in 3.1.1
		}{{"up", 0}, {"quota", 0x97}, {"malformed", 0x99}, {"fail", 0x80}, {"nowhere", 0x90}, {"up/x", 0}} {
			id := rc.publish(c.topic, 1, "p")
			if version == 4 && c.want != 0 {
				rc.ping() // no PUBACK before the PINGRESP
				continue
			}
			ack := rc.read(packets.Puback)
			if ack.PacketID != id || ack.ReasonCode != c.want {
				t.Errorf("v%d publish to %s: PUBACK id %d reason %#x, want id %d reason %#x", version, c.topic, ack.PacketID, ack.ReasonCode, id, c.want)
			}
		}
		rc.publish("fail", 0, "p")
		rc.publish("up", 0, "zero")
		rc.ping()
	}
	want := []string{"up 1 p", "up/x 1 p", "up 0 zero"}
	want = append(want, want...)
	if got := h.got(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("accepted %q, want %q", got, want)
	}
	if got := b.PublishesRefused(); got != (PublishRefusals{Quota: 2, Malformed: 2, Topic: 2, Failed: 4}) {
		t.Errorf("refusals counted %+v", got)
	}
}

// TestPubackWaitsForHandler: the PUBACK of a QoS 1 publish is written only
// once Published has returned.
func TestPubackWaitsForHandler(t *testing.T) {
	h := &pubHandler{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	_, addr := startBroker(t, Config{}, h)
	rc, _ := rawConnect(t, addr, 5, "app/dev", "secret")
	rc.publish("up", 1, "p")
	<-h.entered
	_ = rc.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var ne net.Error
	if _, err := rc.r.ReadByte(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read while Published blocks: %v, want a timeout (no PUBACK yet)", err)
	}
	close(h.gate)
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if ack := rc.read(packets.Puback); ack.ReasonCode != 0 {
		t.Fatalf("PUBACK reason %#x", ack.ReasonCode)
	}
}

// TestPublishRateRefused: a publish over the device's publish rate is
// refused like a quota refusal (v5 0x97, 3.1.1 no PUBACK), never
// reaches the handler, and is counted.
func TestPublishRateRefused(t *testing.T) {
	h := &pubHandler{}
	b, addr := startBroker(t, Config{PublishRate: 0.001, PublishBurst: 2}, h)
	rc, _ := rawConnect(t, addr, 5, "app/dev", "secret")
	for i, want := range []byte{0, 0, 0x97} {
		rc.publish("up", 1, "p")
		if ack := rc.read(packets.Puback); ack.ReasonCode != want {
			t.Errorf("publish %d: PUBACK reason %#x, want %#x", i, ack.ReasonCode, want)
		}
	}
	rc.c.Close()
	rc3, _ := rawConnect(t, addr, 4, "app/dev", "secret")
	rc3.publish("up", 1, "p")
	rc3.publish("up", 1, "p")
	rc3.read(packets.Puback)
	rc3.read(packets.Puback)
	rc3.publish("up", 1, "p")
	rc3.ping()
	if got := len(h.got()); got != 4 {
		t.Errorf("handler saw %d publishes, want 4", got)
	}
	if got := b.PublishesRefused().RateLimit; got != 2 {
		t.Errorf("rate refusals counted %d, want 2", got)
	}
}

// TestAnswerRate: publishes on an answer topic count against the answer
// rate, apart from the publish rate: a device that used its publishes
// still answers, and answers over the answer rate are refused as
// publishes over the publish rate are.
func TestAnswerRate(t *testing.T) {
	h := &pubHandler{}
	b, addr := startBroker(t, Config{PublishRate: 0.001, PublishBurst: 2,
		AnswerTopics: []string{"cmd/reply"}, AnswerRate: 0.001, AnswerBurst: 3}, h)
	rc, _ := rawConnect(t, addr, 5, "app/dev", "secret")
	for i, p := range []struct {
		topic string
		want  byte
	}{{"up", 0}, {"up", 0}, {"up", 0x97}, {"cmd/reply", 0}, {"cmd/reply", 0}, {"cmd/reply", 0}, {"cmd/reply", 0x97}, {"up", 0x97}} {
		rc.publish(p.topic, 1, "p")
		if ack := rc.read(packets.Puback); ack.ReasonCode != p.want {
			t.Errorf("publish %d on %s: PUBACK reason %#x, want %#x", i, p.topic, ack.ReasonCode, p.want)
		}
	}
	if got := len(h.got()); got != 5 {
		t.Errorf("handler saw %d publishes, want 5", got)
	}
	if got := b.PublishesRefused().RateLimit; got != 3 {
		t.Errorf("rate refusals counted %d, want 3", got)
	}
}

// TestSessionEnd: the handler learns why each session ended, and what
// protocol and transport it used.
func TestSessionEnd(t *testing.T) {
	h := &pubHandler{ended: make(chan *Session, 10)}
	b, addr := startBroker(t, Config{}, h)
	ended := func(what string, want End) *Session {
		t.Helper()
		select {
		case s := <-h.ended:
			if s.End() != want {
				t.Errorf("%s: session ended with %v, want %v", what, s.End(), want)
			}
			return s
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no Disconnected", what)
		}
		return nil
	}

	rc, _ := rawConnect(t, addr, 5, "app/dev", "secret")
	rc.write([]byte{packets.Disconnect << 4, 0})
	if s := ended("DISCONNECT", EndDisconnect); s.ProtocolVersion != 5 || s.Transport != "tcp" || s.Since.IsZero() {
		t.Errorf("session protocol %d transport %q since %v", s.ProtocolVersion, s.Transport, s.Since)
	}

	rc, _ = rawConnect(t, addr, 4, "app/dev", "secret")
	rc.write([]byte{packets.Disconnect << 4, 0})
	if s := ended("3.1.1 DISCONNECT", EndDisconnect); s.ProtocolVersion != 4 {
		t.Errorf("session protocol %d, want 4", s.ProtocolVersion)
	}

	rc, _ = rawConnect(t, addr, 4, "app/dev", "secret")
	rc.c.Close()
	ended("connection closed", EndError)

	// mochi writes the CONNACK before it establishes the session, so the
	// second connection could be established first; the first, the older,
	// would then be closed unreported (TestTakeoverAfterConnackOrder), and
	// there would be no takeover to see. Wait for the first's login (the
	// fourth) before the second connects.
	rawConnect(t, addr, 4, "app/dev", "secret")
	waitUntil(t, "the first session established", func() bool { return len(h.connected()) == 4 })
	rawConnect(t, addr, 5, "app/dev", "secret")
	ended("takeover", EndTakeover)

	if !b.Kick("app", "dev") {
		t.Fatal("Kick found no session")
	}
	ended("kick", EndKicked)

	// A 3.1.1 publish outside the device's prefix closes the connection
	// (3.1.1 cannot refuse one publish): the device's doing, an error,
	// not a kick by the service (mochi stops it with "not authorized",
	// the cause Kick uses too).
	rc, _ = rawConnect(t, addr, 4, "app/dev", "secret")
	var buf bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		TopicName: "d/app/other/up", PacketID: 1, Payload: []byte("p")}
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	rc.write(buf.Bytes())
	ended("3.1.1 publish outside the prefix", EndError)

	rawConnectKeepalive(t, addr, 4, "app/dev", "secret", 1) // silent: times out after 1.5 s
	ended("keepalive", EndKeepalive)

	// Close, from a broker of its own: startBroker's closes at cleanup.
	b2 := New(Config{TCPAddr: "127.0.0.1:0"}, h, b.log)
	addrs, err := b2.Start()
	if err != nil {
		t.Fatal(err)
	}
	rawConnect(t, addrs["tcp"], 5, "app/dev", "secret")
	waitUntil(t, "session", func() bool { return b2.Session("app", "dev") != nil })
	b2.Close()
	ended("shutdown", EndShutdown)
}

// connectedSession starts a broker and connects app/dev to it over MQTT
// 3.1.1, returning the device's end and its established session.
func connectedSession(t *testing.T) (*rawClient, *Session) {
	t.Helper()
	b, addr := startBroker(t, Config{}, &pubHandler{})
	rc, code := rawConnect(t, addr, 4, "app/dev", "secret")
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	waitUntil(t, "session", func() bool { return b.Session("app", "dev") != nil })
	return rc, b.Session("app", "dev")
}

// TestPublishAll checks that PublishAll sends its payloads in order, with
// the packet ids it returns.
func TestPublishAll(t *testing.T) {
	rc, s := connectedSession(t)
	ids, err := s.PublishAll("msg", [][]byte{[]byte("a"), []byte("b"), []byte("c")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("%d packet ids, want 3", len(ids))
	}
	for i, want := range []string{"a", "b", "c"} {
		pk := rc.read(packets.Publish)
		if pk.TopicName != "d/app/dev/msg" || string(pk.Payload) != want || pk.PacketID != ids[i] || pk.FixedHeader.Qos != 1 {
			t.Errorf("publish %d: %s %q id %d qos %d, want d/app/dev/msg %q id %d qos 1", i, pk.TopicName, pk.Payload, pk.PacketID, pk.FixedHeader.Qos, want, ids[i])
		}
	}
	if ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Errorf("packet ids %v not distinct", ids)
	}
}

// TestPublishTopicNames checks the kept topic name: publishes alternating
// between topics each carry their own, and one repeated costs no
// allocation.
func TestPublishTopicNames(t *testing.T) {
	rc, s := connectedSession(t)
	topics := []string{"msg", "msg", "prop", "msg"}
	for i, topic := range topics {
		if _, err := s.PublishAll(topic, [][]byte{[]byte{'0' + byte(i)}, []byte("x")}, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i, topic := range topics {
		for range 2 {
			if pk := rc.read(packets.Publish); pk.TopicName != "d/app/dev/"+topic {
				t.Errorf("publish %d: topic %s, want d/app/dev/%s", i, pk.TopicName, topic)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { s.topicName("msg") }); n != 0 {
		t.Errorf("topicName of the last topic: %v allocations", n)
	}
}

// TestSessionReceiveMaximum checks that a session reports the Receive
// Maximum its device's MQTT 5 CONNECT declared, and 0 when there is none
// (an MQTT 5 CONNECT without it, or MQTT 3.1.1).
func TestSessionReceiveMaximum(t *testing.T) {
	b, addr := startBroker(t, Config{}, &fakeHandler{})
	for _, c := range []struct {
		version byte
		props   packets.Properties
		want    int
	}{
		{5, packets.Properties{ReceiveMaximum: 5}, 5},
		{5, packets.Properties{}, 0},
		{4, packets.Properties{}, 0},
	} {
		rc, code := rawConnectWith(t, addr, c.version, "app/dev", "secret", 60, c.props)
		if code != 0 {
			t.Fatalf("CONNACK %#x", code)
		}
		var s *Session
		waitUntil(t, "the session", func() bool { s = b.Session("app", "dev"); return s != nil && s.ProtocolVersion == c.version })
		if got := s.ReceiveMaximum(); got != c.want {
			t.Errorf("MQTT %d declaring %d: ReceiveMaximum %d, want %d", c.version, c.props.ReceiveMaximum, got, c.want)
		}
		rc.c.Close()
		waitUntil(t, "the session gone", func() bool { return b.Session("app", "dev") == nil })
	}
}

// askingHandler sends the device a request from inside Published, as the
// command service sends a device its next command as it takes an answer.
type askingHandler struct{ pubHandler }

func (h *askingHandler) Published(s *Session, topic string, qos byte, payload []byte) error {
	if _, err := s.PublishRequest("cmd", payload, "cmd/reply", nil); err != nil {
		return err
	}
	return h.pubHandler.Published(s, topic, qos, payload)
}

// TestRequestGoesWithPuback: a request published to the device while its
// publish is handled arrives before that publish's PUBACK, in the same
// segment (one write); it also arrives when no PUBACK follows (QoS 0, a
// 3.1.1 refusal), and without waiting for a next packet that has only
// partly arrived.
func TestRequestGoesWithPuback(t *testing.T) {
	h := &askingHandler{pubHandler{refuse: map[string]error{"fail": errors.New("store down")}}}
	_, addr := startBroker(t, Config{}, h)
	for _, version := range []byte{4, 5} {
		rc, _ := rawConnect(t, addr, version, "app/dev", "secret")
		id := rc.publish("up", 1, "one")
		if req := rc.read(packets.Publish); string(req.Payload) != "one" {
			t.Fatalf("v%d request %q, want %q", version, req.Payload, "one")
		}
		if rc.r.Buffered() == 0 {
			t.Errorf("v%d: the PUBACK did not come in the request's segment", version)
		}
		if ack := rc.read(packets.Puback); ack.PacketID != id {
			t.Fatalf("v%d PUBACK id %d, want %d", version, ack.PacketID, id)
		}
		for _, p := range []struct {
			topic string
			qos   byte
		}{{"up", 0}, {"fail", 1}} {
			rc.publish(p.topic, p.qos, p.topic)
			if req := rc.read(packets.Publish); string(req.Payload) != p.topic {
				t.Fatalf("v%d request %q, want %q", version, req.Payload, p.topic)
			}
			if p.qos > 0 && version == 5 {
				rc.read(packets.Puback) // the refusal's
			}
		}
		// A publish and the first byte of the next packet in one
		// segment: the request goes before the rest of that packet.
		for _, qos := range []byte{0, 1} {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, ProtocolVersion: version,
				TopicName: "d/app/dev/up", Payload: []byte("partial"), PacketID: 100}
			var buf bytes.Buffer
			if err := pk.PublishEncode(&buf); err != nil {
				t.Fatal(err)
			}
			rc.write(append(buf.Bytes(), buf.Bytes()[0]))
			_ = rc.c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if req := rc.read(packets.Publish); string(req.Payload) != "partial" {
				t.Fatalf("v%d request %q, want %q", version, req.Payload, "partial")
			}
			if qos > 0 {
				rc.read(packets.Puback)
			}
			rc.write(buf.Bytes()[1:])
			rc.read(packets.Publish)
			if qos > 0 {
				rc.read(packets.Puback)
			}
			_ = rc.c.SetReadDeadline(time.Time{})
		}
		rc.ping()
		rc.c.Close()
	}
}
