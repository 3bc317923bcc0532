package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// fakeHandler admits every device whose secret is "secret" and records
// the sessions it is told about.
type fakeHandler struct {
	// block, when set, holds Connected of the session whose client id it
	// names until the channel is closed.
	block   map[string]chan struct{}
	mu      sync.Mutex
	logins  []string // client ids in the order Connected was called
	authent int
}

func (h *fakeHandler) Authenticate(_, _, secret string) error {
	h.mu.Lock()
	h.authent++
	h.mu.Unlock()
	if secret != "secret" {
		return ErrNotAuthorized
	}
	return nil
}

func (h *fakeHandler) Connected(s *Session) {
	if ch := h.block[s.ClientID]; ch != nil {
		<-ch
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logins = append(h.logins, s.ClientID)
}

func (h *fakeHandler) connected() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.logins...)
}

func (*fakeHandler) Disconnected(*Session)                          {}
func (*fakeHandler) Subscribed(*Session, string)                    {}
func (*fakeHandler) Unsubscribed(*Session, string)                  {}
func (*fakeHandler) Published(*Session, string, byte, []byte) error { return nil }
func (*fakeHandler) Acked(*Session, uint16)                         {}

func startBroker(t testing.TB, cfg Config, h Handler) (*Broker, string) {
	t.Helper()
	cfg.TCPAddr = "127.0.0.1:0"
	cfg.ServiceTopics = []string{"msg", "property/desired"}
	b := New(cfg, h, slog.New(slog.NewTextHandler(io.Discard, nil)))
	addrs, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, addrs["tcp"]
}

// dial connects a 3.1.1 client; it returns the connect error.
func dial(t *testing.T, addr, user, secret, clientID string) (paho.Client, error) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(clientID).
		SetUsername(user).SetPassword(secret).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c, nil
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestLoginsInTakeoverOrder: when the report of a device's older session
// is slow, the newer session's report waits for it, so the handler never
// records the older login last.
func TestLoginsInTakeoverOrder(t *testing.T) {
	release := make(chan struct{})
	h := &fakeHandler{block: map[string]chan struct{}{"first": release}}
	b, addr := startBroker(t, Config{}, h)
	if _, err := dial(t, addr, "app/dev", "secret", "first"); err != nil {
		t.Fatal(err)
	}
	// mochi writes the CONNACK before it establishes the session: wait
	// until the first is established, so that its report is the one
	// blocked (TestTakeoverAfterConnackOrder covers the other order).
	waitUntil(t, "the first session established", func() bool { return b.Session("app", "dev") != nil })
	if _, err := dial(t, addr, "app/dev", "secret", "second"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // room for the second report to overtake, were it allowed to
	close(release)
	waitUntil(t, "both logins reported", func() bool { return len(h.connected()) == 2 })
	if got := h.connected(); got[0] != "first" || got[1] != "second" {
		t.Fatalf("logins reported as %v, want [first second]", got)
	}
	if s := b.Session("app", "dev"); s == nil || s.ClientID != "second" {
		t.Fatalf("current session %+v, want the second", s)
	}
}

// TestTakeoverAfterConnackOrder: a device that connects again as soon as
// it has a CONNACK keeps the newer connection, even when mochi
// establishes the older one (after its CONNACK) only once the newer one
// is established. Found as a device left online by a burst of
// reconnects whose last connection had been closed by an older one.
func TestTakeoverAfterConnackOrder(t *testing.T) {
	release := make(chan struct{})
	testBeforeEstablished = func(cl *mqtt.Client) {
		if strings.HasSuffix(cl.ID, "#1") {
			<-release
		}
	}
	t.Cleanup(func() { testBeforeEstablished = nil })
	h := &fakeHandler{}
	b, addr := startBroker(t, Config{}, h)
	first, err := dial(t, addr, "app/dev", "secret", "first")
	if err != nil {
		t.Fatal(err)
	}
	second, err := dial(t, addr, "app/dev", "secret", "second")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second session established", func() bool { return b.Session("app", "dev") != nil })
	close(release)
	waitUntil(t, "the first connection closed", func() bool { return !first.IsConnectionOpen() })
	time.Sleep(100 * time.Millisecond)
	if !second.IsConnectionOpen() {
		t.Fatal("the second connection, made after the first's CONNACK, was closed")
	}
	if s := b.Session("app", "dev"); s == nil || s.ClientID != "second" {
		t.Fatalf("current session %+v, want the second", s)
	}
	if got := h.connected(); len(got) != 1 || got[0] != "second" {
		t.Fatalf("logins reported as %v, want [second]", got)
	}
	// The first, never reported, leaves nothing behind for a Disconnected
	// to clear: not counted, and gone from mochi's clients too.
	waitUntil(t, "the first client removed", func() bool { return b.server.Clients.Len() == 1 })
	if n := b.Connected(); n != 1 {
		t.Fatalf("%d sessions counted connected, want 1", n)
	}
}

// rawClient speaks MQTT over a bare connection, to read the exact
// reason codes of an MQTT 3.1.1 or 5 SUBACK.
type rawClient struct {
	t       testing.TB
	c       net.Conn
	r       *bufio.Reader
	version byte
	nextID  uint16
}

// rawConnect connects with protocol version 4 (3.1.1) or 5 and returns
// the client and the CONNACK's reason code.
func rawConnect(t testing.TB, addr string, version byte, user, secret string) (*rawClient, byte) {
	t.Helper()
	return rawConnectKeepalive(t, addr, version, user, secret, 60)
}

// rawConnectKeepalive is rawConnect with the keepalive in seconds.
func rawConnectKeepalive(t testing.TB, addr string, version byte, user, secret string, keepalive uint16) (*rawClient, byte) {
	t.Helper()
	return rawConnectWith(t, addr, version, user, secret, keepalive, packets.Properties{})
}

// rawConnectWith is rawConnectKeepalive with the CONNECT's MQTT 5
// properties.
func rawConnectWith(t testing.TB, addr string, version byte, user, secret string, keepalive uint16, props packets.Properties) (*rawClient, byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	rc := &rawClient{t: t, c: c, r: bufio.NewReader(c), version: version}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version, Properties: props}
	pk.Connect = packets.ConnectParams{
		ProtocolName: []byte("MQTT"), Clean: true, Keepalive: keepalive, ClientIdentifier: "raw",
		UsernameFlag: true, Username: []byte(user), PasswordFlag: true, Password: []byte(secret),
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	rc.write(buf.Bytes())
	ack := rc.read(packets.Connack)
	return rc, ack.ReasonCode
}

func (rc *rawClient) write(b []byte) {
	rc.t.Helper()
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one packet, which must be of type want.
func (rc *rawClient) read(want byte) packets.Packet {
	rc.t.Helper()
	hb, err := rc.r.ReadByte()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	pk := packets.Packet{ProtocolVersion: rc.version}
	if err := pk.FixedHeader.Decode(hb); err != nil {
		rc.t.Fatal(err)
	}
	n, _, err := packets.DecodeLength(rc.r)
	if err != nil {
		rc.t.Fatal(err)
	}
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(rc.r, body); err != nil {
		rc.t.Fatal(err)
	}
	if pk.FixedHeader.Type != want {
		rc.t.Fatalf("got packet type %d, want %d", pk.FixedHeader.Type, want)
	}
	switch want {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	}
	if err != nil {
		rc.t.Fatal(err)
	}
	return pk
}

// subscribe sends one SUBSCRIBE with the filters and returns the SUBACK codes.
func (rc *rawClient) subscribe(filters ...string) []byte {
	rc.t.Helper()
	rc.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: rc.version, PacketID: rc.nextID}
	for _, f := range filters {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: f, Qos: 1})
	}
	var buf bytes.Buffer
	if err := pk.SubscribeEncode(&buf); err != nil {
		rc.t.Fatal(err)
	}
	rc.write(buf.Bytes())
	return rc.read(packets.Suback).ReasonCodes
}

// TestSubscriptionLimit: one connection holds at most MaxSubscriptions
// filters; a SUBSCRIBE of 1000 gets exactly that many granted, the rest
// refused, and the broker holds nothing of them once the device has gone.
func TestSubscriptionLimit(t *testing.T) {
	b, addr := startBroker(t, Config{}, &fakeHandler{})
	c, err := dial(t, addr, "app/dev", "secret", "dev")
	if err != nil {
		t.Fatal(err)
	}
	filters := map[string]byte{}
	for i := range 1000 {
		filters[fmt.Sprintf("d/app/dev/f/%d", i)] = 1
	}
	tok := c.SubscribeMultiple(filters, nil)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	granted, refused := 0, 0
	for f, code := range tok.(*paho.SubscribeToken).Result() {
		switch code {
		case 0, 1:
			granted++
		case 0x80:
			refused++
		default:
			t.Fatalf("%s: SUBACK %#x", f, code)
		}
	}
	if granted != MaxSubscriptions || refused != 1000-MaxSubscriptions {
		t.Fatalf("granted %d, refused %d; want %d and %d", granted, refused, MaxSubscriptions, 1000-MaxSubscriptions)
	}
	if n := atomic.LoadInt64(&b.server.Info.Subscriptions); n != MaxSubscriptions {
		t.Fatalf("broker holds %d subscriptions, want %d", n, MaxSubscriptions)
	}
	c.Disconnect(0)
	waitUntil(t, "the subscriptions to be dropped", func() bool { return atomic.LoadInt64(&b.server.Info.Subscriptions) == 0 })
	if got := b.SubscriptionsRefused().Limit; got != 1000-MaxSubscriptions {
		t.Errorf("SubscriptionsRefused = %d, want %d", got, 1000-MaxSubscriptions)
	}
}

// TestSubscribeRefusals: the SUBACK codes of every refusal, in MQTT 3.1.1
// (0x80 for all) and MQTT 5 (the reason).
func TestSubscribeRefusals(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprint("version ", version), func(t *testing.T) {
			b, addr := startBroker(t, Config{SubscribeRate: 1e-6, SubscribeBurst: 4}, &fakeHandler{})
			rc, code := rawConnect(t, addr, version, "app/dev", "secret")
			if code != 0 {
				t.Fatalf("CONNACK %#x", code)
			}
			v5 := func(c byte) byte {
				if version < 5 {
					return 0x80
				}
				return c
			}
			// SUBSCRIBE 1: outside the prefix and shared subscriptions.
			outside := []string{"$share/g/d/app/dev/msg", "$share/g/d/app/dev/#", "$SHARE/g/#", "$share/g/d/app/other/msg",
				"d/app/other/msg", "d/app/+/msg", "d/+/dev/msg", "#", "$SYS/#", "d/app/dev/"}
			want := []byte{0x9E, 0x9E, 0x9E, 0x9E, 0x87, 0x87, 0x87, 0x87, 0x87, 0x87}
			for i, got := range rc.subscribe(outside...) {
				if got != v5(want[i]) {
					t.Errorf("SUBSCRIBE %s: %#x, want %#x", outside[i], got, v5(want[i]))
				}
			}
			// SUBSCRIBE 2: up to the limit, then over it; a filter held
			// already may be subscribed again.
			var own []string
			for i := range MaxSubscriptions + 2 {
				own = append(own, fmt.Sprintf("d/app/dev/f/%d", i))
			}
			codes := rc.subscribe(own...)
			for i, got := range codes {
				if want := byte(1); i >= MaxSubscriptions {
					want = v5(0x97)
					if got != want {
						t.Errorf("filter %d over the limit: %#x, want %#x", i, got, want)
					}
				} else if got != want {
					t.Errorf("filter %d: %#x, want %#x", i, got, want)
				}
			}
			if got := rc.subscribe(own[0]); got[0] != 1 {
				t.Errorf("SUBSCRIBE again to a held filter: %#x, want 1", got[0])
			}
			// SUBSCRIBE 4 was the last of the burst: the 5th is refused whole.
			if got := rc.subscribe(own[0], own[1]); got[0] != 1 || got[1] != 1 {
				t.Errorf("4th SUBSCRIBE: %#x, want granted", got)
			}
			if got := rc.subscribe(own[0], own[1]); got[0] != v5(0x97) || got[1] != v5(0x97) {
				t.Errorf("SUBSCRIBE over the rate: %#x, want %#x for both", got, v5(0x97))
			}
			// Every refusal is counted, by why.
			wantN := SubscriptionRefusals{Topic: int64(len(outside)), Limit: 2, Rate: 2}
			if got := b.SubscriptionsRefused(); got != wantN {
				t.Errorf("SubscriptionsRefused = %+v, want %+v", got, wantN)
			}
		})
	}
}
