package device

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
)

// The command side of the protocol, over MQTT 3.1.1 and MQTT 5, with
// Mosquitto as the broker and a backend client that speaks the service's
// side of the cmd topics (what the service publishes on cmd and
// cmd/cancel, what it expects on cmd/reply and cmd/progress). The same
// SDK against the devmsg service itself is tested in cmd/devmsg.
func TestCommandsOverMosquitto(t *testing.T) {
	addr := startMosquitto(t)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("mqtt%d", v), func(t *testing.T) {
			testCommands(t, addr, v)
		})
	}
}

// reply is what arrives on the backend's reply topic.
type reply struct {
	ID      string          `json:"cmd_id"`
	Code    int             `json:"code"`
	Result  json.RawMessage `json:"result"`
	Message string          `json:"message"`
	Corr    string          `json:"-"`
	Topic   string          `json:"-"`
}

// cmdHarness is the service's side of the cmd topics for one device, on
// a backend client of Mosquitto.
type cmdHarness struct {
	t          *testing.T
	ctx        context.Context
	version    byte
	prefix     string
	replyTopic string
	backend    *autopaho.ConnectionManager
	replies    chan reply
	progress   chan string
}

func newCmdHarness(t *testing.T, ctx context.Context, addr, name string, version byte) *cmdHarness {
	h := &cmdHarness{
		t: t, ctx: ctx, version: version, prefix: "d/app/" + name + "/",
		replies: make(chan reply, 16), progress: make(chan string, 16),
	}
	h.replyTopic = h.prefix + "cmd/reply"
	if version == 5 {
		// The answer goes where the Response Topic says.
		h.replyTopic = "backend/" + name + "/replies"
	}
	h.backend = backendClient(t, ctx, addr, h.received, h.prefix+"cmd/reply", h.prefix+"cmd/progress", h.replyTopic)
	return h
}

// received sorts what the backend gets into replies and progress.
func (h *cmdHarness) received(p *paho.Publish) {
	if p.Topic == h.prefix+"cmd/progress" {
		h.progress <- string(p.Payload)
		return
	}
	var r reply
	if err := json.Unmarshal(p.Payload, &r); err != nil {
		h.t.Errorf("reply %s: %v", p.Payload, err)
	}
	r.Topic = p.Topic
	if p.Properties != nil {
		r.Corr = string(p.Properties.CorrelationData)
	}
	h.replies <- r
}

// send publishes payload on the device's topic, with MQTT 5 the Response
// Topic and corr as Correlation Data when corr is not empty.
func (h *cmdHarness) send(topic, payload, corr string) {
	h.t.Helper()
	p := &paho.Publish{Topic: h.prefix + topic, QoS: 1, Payload: []byte(payload)}
	if h.version == 5 && corr != "" {
		p.Properties = &paho.PublishProperties{ResponseTopic: h.replyTopic, CorrelationData: []byte(corr)}
	}
	if _, err := h.backend.Publish(h.ctx, p); err != nil {
		h.t.Fatal(err)
	}
}

// command sends command id.
func (h *cmdHarness) command(id int, name, params string) {
	h.t.Helper()
	h.send("cmd", fmt.Sprintf(`{"cmd_id":"%d","name":%q,"params":%s,"timeout":30,"expire_time":0}`, id, name, params), strconv.Itoa(id))
}

// next returns the next reply, checked for where it came.
func (h *cmdHarness) next() reply {
	h.t.Helper()
	select {
	case r := <-h.replies:
		if r.Topic != h.replyTopic {
			h.t.Errorf("reply on %s, want %s", r.Topic, h.replyTopic)
		}
		if h.version == 5 && r.Corr != r.ID {
			h.t.Errorf("correlation data %q, want %q", r.Corr, r.ID)
		}
		return r
	case <-h.ctx.Done():
		h.t.Fatal("no reply")
		return reply{}
	}
}

// expect checks the next reply's id, code and result ("" for none).
func (h *cmdHarness) expect(id, code int, result string) reply {
	h.t.Helper()
	r := h.next()
	if r.ID != strconv.Itoa(id) || r.Code != code || string(r.Result) != result {
		h.t.Fatalf("reply %+v, want cmd_id %d code %d result %s", r, id, code, result)
	}
	return r
}

func testCommands(t *testing.T, addr string, version byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("dev-v%d", version)
	h := newCmdHarness(t, ctx, addr, name, version)

	var pings atomic.Int32
	blocked := make(chan struct{})
	cancelled := make(chan struct{})
	cfg := Config{Broker: "tcp://" + addr, AppKey: "app", DeviceName: name, ProtocolVersion: version}
	cfg.OnCommand("ping", func(_ context.Context, cmd *Command) Answer {
		pings.Add(1)
		return Answer{Result: cmd.Params}
	})
	cfg.OnCommand("fail", func(context.Context, *Command) Answer {
		return Answer{Code: 1, Message: "failed as asked"}
	})
	cfg.OnCommand("block", func(ctx context.Context, cmd *Command) Answer {
		if err := cmd.Progress(ctx, 50, map[string]string{"step": "half"}); err != nil {
			t.Errorf("progress: %v", err)
		}
		close(blocked)
		<-ctx.Done()
		close(cancelled)
		return Answer{Code: 2, Message: "cancelled"}
	})
	cfg.OnCommand("panic", func(context.Context, *Command) Answer { panic("boom") })
	d, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	h.command(1, "ping", `{"n":[1,2]}`)
	h.expect(1, 0, `{"n":[1,2]}`)
	// Sent again (as after a reconnect): the stored answer, the handler
	// not run again.
	h.command(1, "ping", `{"n":[1,2]}`)
	h.expect(1, 0, `{"n":[1,2]}`)
	if n := pings.Load(); n != 1 {
		t.Fatalf("ping handler ran %d times", n)
	}
	h.command(2, "fail", `null`)
	if r := h.expect(2, 1, ""); r.Message != "failed as asked" {
		t.Fatalf("fail answer %+v", r)
	}
	h.command(3, "no-such", `null`)
	h.expect(3, CodeUnknownCommand, "")
	h.command(4, "panic", `null`)
	h.expect(4, CodeHandlerFailed, "")

	h.command(5, "block", `null`)
	select {
	case p := <-h.progress:
		if p != `{"cmd_id":"5","progress":50,"details":{"step":"half"}}` {
			t.Fatalf("progress %s", p)
		}
	case <-ctx.Done():
		t.Fatal("no progress")
	}
	<-blocked
	h.command(5, "block", `null`) // while running: ignored
	h.send("cmd/cancel", `{"cmd_id":"5"}`, "")
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("cancel did not end the handler's context")
	}
	// A cancelled command is not answered, and not run again.
	h.command(5, "block", `null`)
	h.command(6, "ping", `"after"`)
	h.expect(6, 0, `"after"`)
}

// backendClient is an MQTT 5 client subscribed to topics that hands every
// PUBLISH it receives to got.
func backendClient(t *testing.T, ctx context.Context, addr string, got func(*paho.Publish), topics ...string) *autopaho.ConnectionManager {
	t.Helper()
	u, _ := url.Parse("tcp://" + addr)
	up := make(chan struct{}, 1)
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 30, CleanStartOnInitialConnection: true,
		OnConnectionUp: func(*autopaho.ConnectionManager, *paho.Connack) { up <- struct{}{} },
		ClientConfig: paho.ClientConfig{
			ClientID: "backend-" + strconv.Itoa(int(time.Now().UnixNano()%1e6)),
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(r paho.PublishReceived) (bool, error) { got(r.Packet); return true, nil },
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = cm.Disconnect(c)
	})
	select {
	case <-up:
	case <-ctx.Done():
		t.Fatal("backend client did not connect")
	}
	s := &paho.Subscribe{}
	for _, topic := range topics {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: topic, QoS: 1})
	}
	if _, err := cm.Subscribe(ctx, s); err != nil {
		t.Fatal(err)
	}
	return cm
}

// startMosquitto runs Debian's Mosquitto on a free loopback port.
func startMosquitto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto"
		if _, err := os.Stat(bin); err != nil {
			t.Skip("mosquitto not installed (Debian package mosquitto; CI installs it)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	_, port, _ := net.SplitHostPort(addr)
	if err := os.WriteFile(conf, []byte("listener "+port+" 127.0.0.1\nallow_anonymous true\npersistence false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("mosquitto did not listen")
		}
	}
}
