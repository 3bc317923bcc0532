package main

// End-to-end delivery tests against the real binary, as a device and an
// app would see it, and their helpers.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// deliveryApp is one app on a devmsg process started for the test, with
// the calls the delivery tests make as that app.
type deliveryApp struct {
	t   *testing.T
	p   *proc
	app testApp
}

func newDeliveryApp(t *testing.T, dir string) *deliveryApp {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	return &deliveryApp{t: t, p: p, app: p.createApp(t, "delivery")}
}

func (a *deliveryApp) call(method, path, body string) (int, []byte) {
	return a.p.call(a.t, a.app.Key, a.app.MasterSecret, method, path, body)
}

func (a *deliveryApp) device(name string) string {
	a.t.Helper()
	st, body := a.call("POST", "/device/v1/devices", fmt.Sprintf(`{"device":[{"name":%q}]}`, name))
	var cr struct {
		Resp []struct {
			Code         int
			DeviceSecret string `json:"device_secret"`
		}
	}
	if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != 1 || cr.Resp[0].Code != 0 {
		a.t.Fatalf("create device: %d %s", st, body)
	}
	return cr.Resp[0].DeviceSecret
}

var deliverySeq atomic.Int64

func (a *deliveryApp) trySend(dev string, ttl int) (int64, int, []byte, error) {
	seq := deliverySeq.Add(1)
	st, b, err := a.p.tryCall(a.app.Key, a.app.MasterSecret, "POST", "/msg/v1/msg",
		fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"m%d","ttl":%d}`, seq, dev, seq, ttl))
	if err != nil || st != 200 {
		return 0, st, b, err
	}
	var r struct{ Msgid int64 }
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, st, b, err
	}
	return r.Msgid, st, b, nil
}

func (a *deliveryApp) send(dev string, ttl int) int64 {
	a.t.Helper()
	id, st, b, err := a.trySend(dev, ttl)
	if err != nil || st != 200 {
		a.t.Fatalf("send: %d %s %v", st, b, err)
	}
	return id
}

type deliveryMsg struct {
	State   string
	Records []struct {
		Type  int
		Error *struct{ Code int }
	}
}

func (a *deliveryApp) msg(id int64) (int, deliveryMsg) {
	st, b, err := a.p.tryCall(a.app.Key, a.app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
	var m deliveryMsg
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return st, m
}

func (m deliveryMsg) types() []int {
	var ts []int
	for _, r := range m.Records {
		ts = append(ts, r.Type)
	}
	return ts
}

func payloadID(m paho.Message) int64 {
	var pl struct{ Msgid string }
	if json.Unmarshal(m.Payload(), &pl) != nil {
		return 0
	}
	id, _ := strconv.ParseInt(pl.Msgid, 10, 64)
	return id
}

// TestExpiryFreesTheWindow: a device that never acknowledges holds 64
// messages in flight; when they expire, they give up their places at once
// and the messages queued behind them follow on the same connection
// without waiting for some other wake-up (docs/device-protocol.md,
// "Messages").
func TestExpiryFreesTheWindow(t *testing.T) {
	a := newDeliveryApp(t, t.TempDir())
	secret := a.device("win-00001")
	var mu sync.Mutex
	var got []paho.Message
	c := connectDevice(t, a.p.mqtt, a.app.Key, "win-00001", secret, true, func(m paho.Message) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	})
	defer c.Disconnect(0)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	var short []int64
	for range 64 {
		short = append(short, a.send("win-00001", 2))
	}
	var long []int64
	for range 10 {
		long = append(long, a.send("win-00001", 3600))
	}
	waitFor(t, 10*time.Second, "64 in flight", func() bool { return count() >= 64 })
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != 64 {
		t.Errorf("%d in flight, want 64", n)
	}
	// The 64 expire (ttl 2 + 2 s grace); the 10 long ones must follow on
	// this connection without any PUBACK.
	waitFor(t, 15*time.Second, "short ones expired", func() bool { _, m := a.msg(short[63]); return m.State == "expired" })
	deadline := time.Now().Add(5 * time.Second)
	for count() < 74 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := count(); n != 74 {
		t.Errorf("after the 64 in flight expired, %d messages received on the connection, want 74 (the window is not freed by expiry)", n)
	}
	// Late PUBACKs of the expired ones are ignored.
	mu.Lock()
	for _, m := range got[:64] {
		m.Ack()
	}
	mu.Unlock()
	deadline = time.Now().Add(5 * time.Second)
	for count() < 74 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after the late PUBACKs of the expired 64: %d received", count())
	for _, id := range short {
		if _, m := a.msg(id); m.State != "expired" || !slices.Equal(m.types(), []int{0, 2, 5}) {
			t.Errorf("message %d after a late PUBACK: %s %v, want expired [0 2 5]", id, m.State, m.types())
			break
		}
	}
}
