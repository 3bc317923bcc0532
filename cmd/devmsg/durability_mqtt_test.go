package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestKill9MessagesSettle kills the server with messages pending, some
// sent and unacknowledged, some acknowledged, one retracted and some
// about to expire, and expects every message to end delivered, expired or
// retracted after the restart, with the records that say so.
func TestKill9MessagesSettle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	p := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	app := p.createApp(t, "settle")
	call := func(p *proc, method, path, body string) (int, []byte) {
		return p.call(t, app.Key, app.MasterSecret, method, path, body)
	}
	st, body := call(p, "POST", "/device/v1/devices", `{"device":[{"name":"settle-1"}]}`)
	var cr struct {
		Resp []struct {
			DeviceSecret string `json:"device_secret"`
		}
	}
	if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != 1 {
		t.Fatalf("create device: %d %s", st, body)
	}
	secret := cr.Resp[0].DeviceSecret

	send := func(seq, ttl int) int64 {
		st, b := call(p, "POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"settle-1","msg_body":"m%d","ttl":%d}`, seq, seq, ttl))
		var r struct{ Msgid int64 }
		if st != 200 || json.Unmarshal(b, &r) != nil {
			t.Fatalf("send %d: %d %s", seq, st, b)
		}
		return r.Msgid
	}
	var long, short []int64
	for i := range 30 {
		long = append(long, send(i, 3600))
	}
	for i := range 5 {
		short = append(short, send(100+i, 3)) // expires while the server is down or soon after
	}

	// A device that acknowledges only the first 10 messages it receives.
	var mu sync.Mutex
	var received []int64
	acked := map[int64]bool{}
	c := connectDevice(t, p.mqtt, app.Key, "settle-1", secret, true, func(m paho.Message) {
		var pl struct{ Msgid string }
		if json.Unmarshal(m.Payload(), &pl) != nil {
			return
		}
		id, _ := strconv.ParseInt(pl.Msgid, 10, 64)
		mu.Lock()
		defer mu.Unlock()
		received = append(received, id)
		if len(acked) < 10 {
			acked[id] = true
			m.Ack()
		}
	})
	waitFor(t, 10*time.Second, "all 35 messages sent to the device", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) >= 35
	})
	mu.Lock()
	if !slices.Equal(received[:30], long) {
		t.Errorf("delivery order %v, want send order %v", received[:30], long)
	}
	mu.Unlock()
	// Wait until the 10 acknowledgements are stored, then retract one
	// message that was sent but not acknowledged.
	for id := range acked {
		waitFor(t, 10*time.Second, "acknowledged message delivered", func() bool {
			_, b := call(p, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
			return msgState(b) == "delivered"
		})
	}
	retracted := long[20]
	if st, b := call(p, "DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", retracted), ""); st != 200 || msgState(b) != "retracted" {
		t.Fatalf("retract: %d %s", st, b)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	c.Disconnect(0)

	q := startProc(t, dir, "--mqtt.tcp_addr", "127.0.0.1:0")
	p = q
	// The short-lived messages expire before the device is back.
	for _, id := range short {
		waitFor(t, 15*time.Second, fmt.Sprintf("message %d expired", id), func() bool {
			_, b := call(q, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
			return msgState(b) == "expired"
		})
	}
	c = connectDevice(t, q.mqtt, app.Key, "settle-1", secret, false, func(paho.Message) {})
	defer c.Disconnect(0)
	want := map[string][]int{"delivered": {0, 2, 4}, "expired": {0, 2, 5}, "retracted": {0, 2, 7}}
	for _, id := range slices.Concat(long, short) {
		wantState := "delivered"
		switch {
		case id == retracted:
			wantState = "retracted"
		case slices.Contains(short, id):
			wantState = "expired"
		}
		var b []byte
		waitFor(t, 10*time.Second, fmt.Sprintf("message %d %s", id, wantState), func() bool {
			_, b = call(q, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
			return msgState(b) == wantState
		})
		var m struct {
			Records []struct {
				Type  int
				Error *struct{ Code int }
			}
		}
		must(t, json.Unmarshal(b, &m))
		var types []int
		for _, r := range m.Records {
			types = append(types, r.Type)
		}
		if !slices.Equal(types, want[wantState]) {
			t.Errorf("message %d (%s): record types %v, want %v", id, wantState, types, want[wantState])
		}
		if wantState == "expired" && (m.Records[2].Error == nil || m.Records[2].Error.Code != 3005) {
			t.Errorf("message %d: expiry record %s, want error 3005", id, b)
		}
	}
}

func msgState(b []byte) string {
	var m struct{ State string }
	_ = json.Unmarshal(b, &m)
	return m.State
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectDevice connects a paho client as the device and subscribes to
// its msg topic at QoS 1. With manualAck the handler decides which
// messages to acknowledge (m.Ack()); otherwise paho acknowledges each
// when the handler returns.
func connectDevice(t *testing.T, addr, appKey, device, secret string, manualAck bool, h func(paho.Message)) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker("tcp://" + addr).
		SetClientID(appKey + "/" + device).SetUsername(appKey + "/" + device).SetPassword(secret).
		SetCleanSession(true).SetAutoReconnect(false).SetAutoAckDisabled(manualAck).
		SetOrderMatters(true)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", device, tok.Error())
	}
	topic := "d/" + appKey + "/" + device + "/msg"
	if tok := c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { h(m) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", topic, tok.Error())
	}
	return c
}
