package main

// Helpers of the outside tester's end-to-end delivery tests (issue 16).

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

type a16 struct {
	t   *testing.T
	p   *proc
	app testApp
}

func newA16(t *testing.T, dir string) *a16 {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	return &a16{t: t, p: p, app: p.createApp(t, "attack16")}
}

func (a *a16) call(method, path, body string) (int, []byte) {
	return a.p.call(a.t, a.app.Key, a.app.MasterSecret, method, path, body)
}

func (a *a16) device(name string) string {
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

var a16seq atomic.Int64

func (a *a16) trySend(dev string, ttl int) (int64, int, []byte, error) {
	seq := a16seq.Add(1)
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

func (a *a16) send(dev string, ttl int) int64 {
	a.t.Helper()
	id, st, b, err := a.trySend(dev, ttl)
	if err != nil || st != 200 {
		a.t.Fatalf("send: %d %s %v", st, b, err)
	}
	return id
}

type a16msg struct {
	State   string
	Records []struct {
		Type  int
		Error *struct{ Code int }
	}
}

func (a *a16) msg(id int64) (int, a16msg) {
	st, b, err := a.p.tryCall(a.app.Key, a.app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
	var m a16msg
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return st, m
}

func (m a16msg) types() []int {
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

// A device deleted with messages pending, then created again under the
// same name, must not receive the old device's messages (docs/api.md:
// "a new device ... and an empty queue").

// TestExpiryFreesTheWindow (found by the issue 16 outside tester): a
// device that never acknowledges holds 64 messages in flight; when they
// expire, the messages queued behind them follow on the same connection
// without waiting for some other wake-up.
func TestExpiryFreesTheWindow(t *testing.T) {
	a := newA16(t, t.TempDir())
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

// A device that never acknowledges: exactly 64 in flight; acknowledging
// one lets exactly one more through, in send order.
