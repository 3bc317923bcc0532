package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// fleet is a running server with the demo app of configs/devmsg.yaml,
// driven the way a user's backend and devices drive it.
type fleet struct {
	t   *testing.T
	s   *server
	seq atomic.Int64
}

const (
	demoKey    = "demo-app-key"
	demoSecret = "demo-master-secret"
)

func newFleet(t *testing.T, args ...string) *fleet {
	t.Helper()
	s := startServer(t, append([]string{"--data_dir", t.TempDir(), "--config", "../../configs/devmsg.yaml",
		"--http.tls.enabled=false", "--admin.password", "pw", "--rate_limit.default", "0"}, args...)...)
	return &fleet{t: t, s: s}
}

// rest calls the REST or admin API; user "admin" uses the admin account.
func (f *fleet) rest(method, path, body string) (int, []byte) {
	f.t.Helper()
	if strings.HasPrefix(path, "/admin/") {
		return f.restAs("admin", "pw", method, path, body)
	}
	return f.restAs(demoKey, demoSecret, method, path, body)
}

// restAs calls the API with the given Basic credentials.
func (f *fleet) restAs(user, pass, method, path, body string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, "http://"+f.s.addr+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// restOK calls rest and decodes a 200 response into out (may be nil).
func (f *fleet) restOK(method, path, body string, out any) {
	f.t.Helper()
	st, b := f.rest(method, path, body)
	if st != 200 {
		f.t.Fatalf("%s %s: %d %s", method, path, st, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// createDevice registers a device and returns its secret.
func (f *fleet) createDevice(name string) string {
	f.t.Helper()
	var r struct {
		Resp []struct {
			Code         int    `json:"code"`
			DeviceSecret string `json:"device_secret"`
		} `json:"resp"`
	}
	f.restOK("POST", "/device/v1/devices", `{"device":[{"name":"`+name+`"}]}`, &r)
	if len(r.Resp) != 1 || r.Resp[0].Code != 0 {
		f.t.Fatalf("create %s: %+v", name, r)
	}
	return r.Resp[0].DeviceSecret
}

// send sends a message and returns its msgid.
func (f *fleet) send(device, body string, ttl int) int64 {
	f.t.Helper()
	var r struct{ Msgid int64 }
	f.restOK("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q,"ttl":%d}`, f.seq.Add(1), device, body, ttl), &r)
	return r.Msgid
}

type msgView struct {
	State   string `json:"state"`
	Records []struct {
		Type  int `json:"type"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	} `json:"records"`
}

func (m msgView) types() []int {
	var out []int
	for _, r := range m.Records {
		out = append(out, r.Type)
	}
	return out
}

// lastError is the error code of the last record, 0 without one.
func (m msgView) lastError() int {
	if len(m.Records) == 0 || m.Records[len(m.Records)-1].Error == nil {
		return 0
	}
	return m.Records[len(m.Records)-1].Error.Code
}

func (f *fleet) message(id int64) msgView {
	f.t.Helper()
	var m msgView
	f.restOK("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "", &m)
	return m
}

// waitState polls the message until it reaches state.
func (f *fleet) waitState(id int64, state string) msgView {
	f.t.Helper()
	var m msgView
	waitFor(f.t, 10*time.Second, fmt.Sprintf("message %d %s", id, state), func() bool {
		m = f.message(id)
		return m.State == state
	})
	return m
}

type deviceStatus struct {
	Status         int    `json:"status"`
	ClientIP       string `json:"client_ip"`
	LastLoginTime  string `json:"last_login_time"`
	LastLogoutTime string `json:"last_logout_time"`
}

func (f *fleet) status(name string) deviceStatus {
	f.t.Helper()
	var s deviceStatus
	f.restOK("GET", "/device/v1/status?device_name="+name, "", &s)
	return s
}

// device is a paho client connected as one device, recording what the
// service publishes to it.
type device struct {
	c    paho.Client
	name string
	lost chan error

	mu      sync.Mutex
	msgs    []string // msgids in arrival order
	desired []string // property/desired payloads
	replies []string // property/report/reply payloads
	prefix  string
}

type devOpts struct {
	url       string // default tcp://<tcp listener>
	clientID  string
	username  string // default {app}/{name}
	manualAck bool   // never acknowledge messages
	topics    []string
	version   uint // MQTT protocol version, default 4 (3.1.1)
}

// connect connects a device; it returns the connect error instead of
// failing the test when the connection is refused.
func (f *fleet) connect(name, secret string, o devOpts) (*device, error) {
	f.t.Helper()
	if o.url == "" {
		o.url = "tcp://" + f.s.mqtt["tcp"]
	}
	if o.username == "" {
		o.username = demoKey + "/" + name
	}
	if o.clientID == "" {
		o.clientID = o.username
	}
	if o.version == 0 {
		o.version = 4
	}
	d := &device{name: name, lost: make(chan error, 1), prefix: "d/" + demoKey + "/" + name + "/"}
	opts := paho.NewClientOptions().AddBroker(o.url).SetClientID(o.clientID).
		SetUsername(o.username).SetPassword(secret).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetAutoAckDisabled(o.manualAck).
		SetProtocolVersion(o.version).SetConnectTimeout(5 * time.Second).SetOrderMatters(true).
		SetTLSConfig(&tls.Config{InsecureSkipVerify: true}). // the test server's own self-signed certificate
		SetConnectionLostHandler(func(_ paho.Client, err error) { d.lost <- err })
	d.c = paho.NewClient(opts)
	tok := d.c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, fmt.Errorf("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	f.t.Cleanup(func() { d.c.Disconnect(0) })
	for _, topic := range o.topics {
		d.subscribe(f.t, topic)
	}
	return d, nil
}

// mustConnect connects a device subscribed to topics (relative to its prefix).
func (f *fleet) mustConnect(name, secret string, topics ...string) *device {
	f.t.Helper()
	d, err := f.connect(name, secret, devOpts{topics: topics})
	if err != nil {
		f.t.Fatalf("connect %s: %v", name, err)
	}
	return d
}

// subscribe subscribes to a topic relative to the device's prefix and
// returns the SUBACK code.
func (d *device) subscribe(t *testing.T, topic string) byte {
	t.Helper()
	return d.subscribeTo(t, d.prefix+topic)
}

// subscribeTo subscribes to a full topic filter and returns the SUBACK code.
func (d *device) subscribeTo(t *testing.T, full string) byte {
	t.Helper()
	tok := d.c.Subscribe(full, 1, func(_ paho.Client, m paho.Message) {
		d.mu.Lock()
		defer d.mu.Unlock()
		switch strings.TrimPrefix(m.Topic(), d.prefix) {
		case "msg":
			var p struct{ Msgid string }
			_ = json.Unmarshal(m.Payload(), &p)
			d.msgs = append(d.msgs, p.Msgid)
		case "property/desired":
			d.desired = append(d.desired, string(m.Payload()))
		case "property/report/reply":
			d.replies = append(d.replies, string(m.Payload()))
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", full, tok.Error())
	}
	return tok.(*paho.SubscribeToken).Result()[full]
}

func (d *device) publish(t *testing.T, topic, payload string) {
	t.Helper()
	if tok := d.c.Publish(d.prefix+topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish %s: %v", topic, tok.Error())
	}
}

func (d *device) received() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.msgs...)
}

func (d *device) lastDesired() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.desired) == 0 {
		return ""
	}
	return d.desired[len(d.desired)-1]
}

func (d *device) lastReply() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.replies) == 0 {
		return ""
	}
	return d.replies[len(d.replies)-1]
}

func ids(ns ...int64) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprint(n)
	}
	return out
}
