package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// cmdView is a command document as the API answers it.
type cmdView struct {
	CmdID         int64           `json:"cmd_id"`
	DeviceName    string          `json:"device_name"`
	Name          string          `json:"name"`
	State         string          `json:"state"`
	Code          *int            `json:"code"`
	Result        json.RawMessage `json:"result"`
	Message       string          `json:"message"`
	Progress      int             `json:"progress"`
	TimeCreate    int64           `json:"time_create"`
	TimeSent      int64           `json:"time_sent"`
	TimeDelivered int64           `json:"time_delivered"`
	TimeDone      int64           `json:"time_done"`
}

// devCmd is a command a device received.
type devCmd struct {
	CmdID   string          `json:"cmd_id"`
	Name    string          `json:"name"`
	Params  json.RawMessage `json:"params"`
	Timeout int64           `json:"timeout"`
}

// cmdDevice is a paho client acting as a device that takes commands:
// answer, when set, is called for each command and its return value
// published on cmd/reply (nothing when it returns "").
type cmdDevice struct {
	c      paho.Client
	prefix string

	mu       sync.Mutex
	cmds     []devCmd
	cancels  []string
	answer   func(devCmd) string
	lostConn chan struct{}
}

// connectCmdDevice connects name as a device subscribed to cmd and
// cmd/cancel; with manualAck it never PUBACKs what it receives.
func (f *fleet) connectCmdDevice(name, secret string, manualAck bool, answer func(devCmd) string) *cmdDevice {
	f.t.Helper()
	d := &cmdDevice{prefix: "d/" + demoKey + "/" + name + "/", answer: answer, lostConn: make(chan struct{}, 1)}
	opts := paho.NewClientOptions().AddBroker("tcp://" + f.s.mqtt["tcp"]).SetClientID(demoKey + "/" + name).
		SetUsername(demoKey + "/" + name).SetPassword(secret).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetAutoAckDisabled(manualAck).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(true).
		SetTLSConfig(&tls.Config{InsecureSkipVerify: true}).
		SetConnectionLostHandler(func(paho.Client, error) { d.lostConn <- struct{}{} })
	d.c = paho.NewClient(opts)
	if tok := d.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		f.t.Fatalf("connect %s: %v", name, tok.Error())
	}
	f.t.Cleanup(func() { d.c.Disconnect(0) })
	for _, topic := range []string{"cmd", "cmd/cancel"} {
		tok := d.c.Subscribe(d.prefix+topic, 1, d.onMessage)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			f.t.Fatalf("subscribe %s: %v", topic, tok.Error())
		}
	}
	return d
}

func (d *cmdDevice) onMessage(_ paho.Client, m paho.Message) {
	topic := strings.TrimPrefix(m.Topic(), d.prefix)
	d.mu.Lock()
	if topic == "cmd/cancel" {
		var p struct {
			CmdID string `json:"cmd_id"`
		}
		_ = json.Unmarshal(m.Payload(), &p)
		d.cancels = append(d.cancels, p.CmdID)
		d.mu.Unlock()
		return
	}
	var c devCmd
	_ = json.Unmarshal(m.Payload(), &c)
	d.cmds = append(d.cmds, c)
	answer := d.answer
	d.mu.Unlock()
	if answer != nil {
		if reply := answer(c); reply != "" {
			go d.c.Publish(d.prefix+"cmd/reply", 1, false, reply)
		}
	}
}

func (d *cmdDevice) received() []devCmd {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]devCmd(nil), d.cmds...)
}

func (d *cmdDevice) cancelled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.cancels...)
}

// reply publishes an answer at QoS 1 and waits for its PUBACK.
func (d *cmdDevice) reply(t *testing.T, payload string) {
	t.Helper()
	if tok := d.c.Publish(d.prefix+"cmd/reply", 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish reply: %v", tok.Error())
	}
}

// echo answers every command with code 0 and its params as the result.
func echo(c devCmd) string {
	return fmt.Sprintf(`{"cmd_id":%q,"code":0,"result":%s,"message":"ok"}`, c.CmdID, orNull(c.Params))
}

func orNull(b json.RawMessage) string {
	if len(b) == 0 {
		return "null"
	}
	return string(b)
}

// command sends a command and returns the answer document.
func (f *fleet) command(body string) cmdView {
	f.t.Helper()
	var v cmdView
	f.restOK("POST", "/cmd/v1/cmd", body, &v)
	return v
}

// getCommand reads a command, waiting up to wait seconds for its end.
func (f *fleet) getCommand(id int64, wait int) cmdView {
	f.t.Helper()
	var v cmdView
	f.restOK("GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=%d", id, wait), "", &v)
	return v
}

// errCode calls the API and returns the status and the error code.
func (f *fleet) errCode(method, path, body string) (int, int, string) {
	f.t.Helper()
	st, b := f.rest(method, path, body)
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return st, e.Error.Code, e.Error.Message
}

// metrics returns the server's /metrics text.
func (f *fleet) metrics() string {
	f.t.Helper()
	st, b := f.rest("GET", "/metrics", "")
	if st != 200 {
		f.t.Fatalf("GET /metrics: %d", st)
	}
	return string(b)
}
