package broker

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
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

func (*fakeHandler) Disconnected(*Session)              {}
func (*fakeHandler) Subscribed(*Session, string)        {}
func (*fakeHandler) Unsubscribed(*Session, string)      {}
func (*fakeHandler) Published(*Session, string, []byte) {}
func (*fakeHandler) Acked(*Session, uint16)             {}

func startBroker(t *testing.T, cfg Config, h Handler) (*Broker, string) {
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
