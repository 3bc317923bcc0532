package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Settings of TestCrashLoop, from the environment so that a longer run
// can be made by hand:
//
//	DEVMSG_CRASH_CYCLES=200 DEVMSG_CRASH_CLIENTS=32 go test -run TestCrashLoop -v ./cmd/devmsg
const (
	envCrashCycles  = "DEVMSG_CRASH_CYCLES"  // kill -9 cycles (default 20)
	envCrashClients = "DEVMSG_CRASH_CLIENTS" // concurrent REST senders (default 16)
	envCrashDevices = "DEVMSG_CRASH_DEVICES" // devices connected over MQTT (default 8)
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// crashReq is one send a client made: it keeps its seq_no and body
// through every retry.
type crashReq struct {
	seq    int64
	device string
	body   string
	msgid  int64 // from the 200; 0 while unanswered
}

// crashLedger is what the clients and devices saw, across every cycle.
type crashLedger struct {
	mu       sync.Mutex
	reqs     map[string]*crashReq      // by body
	received map[int64]map[string]bool // msgid → bodies the device got under it
	devOf    map[int64]string          // msgid → device that got it
	answered map[string]map[int64]bool // body → msgids the REST API gave it
}

func newCrashLedger() *crashLedger {
	return &crashLedger{reqs: map[string]*crashReq{}, received: map[int64]map[string]bool{},
		devOf: map[int64]string{}, answered: map[string]map[int64]bool{}}
}

func (l *crashLedger) receive(device string, m paho.Message) {
	var p struct {
		MsgID string `json:"msgid"`
		Body  string `json:"msg_body"`
	}
	if json.Unmarshal(m.Payload(), &p) != nil {
		return
	}
	id, err := strconv.ParseInt(p.MsgID, 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.received[id] == nil {
		l.received[id] = map[string]bool{}
	}
	l.received[id][p.Body] = true
	l.devOf[id] = device
}

// answer records that the REST API answered r with msgid; a second,
// different msgid for the same request is an error.
func (l *crashLedger) answer(t *testing.T, r *crashReq, msgid int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.msgid != 0 && r.msgid != msgid {
		t.Errorf("send %s answered %d, then %d", r.body, r.msgid, msgid)
	}
	r.msgid = msgid
	if l.answered[r.body] == nil {
		l.answered[r.body] = map[int64]bool{}
	}
	l.answered[r.body][msgid] = true
}

// undelivered lists the msgids answered 200 that no device has received.
func (l *crashLedger) undelivered() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int64
	for _, r := range l.reqs {
		if r.msgid != 0 && l.received[r.msgid] == nil {
			ids = append(ids, r.msgid)
		}
	}
	return ids
}

// waitDelivered waits up to timeout for every answered send to reach its
// device, and returns those that did not.
func (l *crashLedger) waitDelivered(timeout time.Duration) []int64 {
	deadline := time.Now().Add(timeout)
	for {
		undelivered := l.undelivered()
		if len(undelivered) == 0 || time.Now().After(deadline) {
			return undelivered
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lost lists the 200s whose msgid the server does not know, and the
// answered sends never delivered. l.mu is held.
func (l *crashLedger) lost(exists func(int64) bool, undelivered []int64) []string {
	var lost []string
	for body, ids := range l.answered {
		for id := range ids {
			if !exists(id) {
				lost = append(lost, fmt.Sprintf("%s: msgid %d answered 200, not found", body, id))
			}
		}
	}
	for _, id := range undelivered {
		lost = append(lost, fmt.Sprintf("msgid %d answered 200, never delivered", id))
	}
	return lost
}

// phantoms lists the msgids a device received that the server does not
// know, or that carried two bodies. l.mu is held.
func (l *crashLedger) phantoms(exists func(int64) bool) []string {
	var phantom []string
	for id, bodies := range l.received {
		switch {
		case len(bodies) > 1:
			phantom = append(phantom, fmt.Sprintf("msgid %d delivered with %d bodies", id, len(bodies)))
		case !exists(id):
			phantom = append(phantom, fmt.Sprintf("msgid %d delivered to %s, not found", id, l.devOf[id]))
		}
	}
	return phantom
}

// duplicated lists the requests known under more than one msgid, from
// their 200s and their deliveries together. l.mu is held.
func (l *crashLedger) duplicated() []string {
	under := map[string]map[int64]bool{}
	add := func(body string, id int64) {
		if under[body] == nil {
			under[body] = map[int64]bool{}
		}
		under[body][id] = true
	}
	for body, ids := range l.answered {
		under[body] = map[int64]bool{}
		for id := range ids {
			add(body, id)
		}
	}
	for id, bodies := range l.received {
		for body := range bodies {
			add(body, id)
		}
	}
	var duplicated []string
	for body, ids := range under {
		if len(ids) > 1 {
			duplicated = append(duplicated, fmt.Sprintf("%s under %d msgids", body, len(ids)))
		}
	}
	return duplicated
}

// createDevices creates n devices named prefix0, prefix1, ... in app
// and returns their names and secrets.
func createDevices(t *testing.T, p *proc, app testApp, prefix string, n int) (names, secrets []string) {
	t.Helper()
	names = make([]string, n)
	devReq := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint(prefix, i)
		devReq[i] = fmt.Sprintf(`{"name":%q}`, names[i])
	}
	st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(devReq, ",")+`]}`)
	var cr struct {
		Resp []struct {
			DeviceSecret string `json:"device_secret"`
		}
	}
	if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != n {
		t.Fatalf("create devices: %d %s", st, body)
	}
	secrets = make([]string, n)
	for i, r := range cr.Resp {
		secrets[i] = r.DeviceSecret
	}
	return names, secrets
}

// msgExists returns a function that asks p, once per msgid, whether
// GET /msg/v1/msg knows the message.
func msgExists(t *testing.T, p *proc, app testApp) func(id int64) bool {
	known := map[int64]bool{}
	return func(id int64) bool {
		if v, ok := known[id]; ok {
			return v
		}
		st, b := p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
		var m struct {
			DeviceName string `json:"device_name"`
		}
		ok := st == 200 && json.Unmarshal(b, &m) == nil
		if !ok && st != 400 {
			t.Fatalf("GET message %d: %d %s", id, st, b)
		}
		known[id] = ok
		return ok
	}
}

// retryPending sends every request left unanswered in pending once more,
// on a server that stays up, and returns how many it sent.
func retryPending[R any](t *testing.T, p *proc, pending [][]R, send func(*proc, R) bool, name func(R) string) int {
	t.Helper()
	retries := 0
	for c := range pending {
		for _, r := range pending[c] {
			if !send(p, r) {
				t.Fatalf("retry %s after the last restart failed", name(r))
			}
			retries++
		}
	}
	return retries
}

// reportProblems fails t with each problem of every list, at most ten
// of a list.
func reportProblems(t *testing.T, lists ...[]string) {
	t.Helper()
	for _, s := range lists {
		for i, e := range s {
			if i == 10 {
				t.Errorf("... and %d more", len(s)-10)
				break
			}
			t.Error(e)
		}
	}
}

// TestCrashLoop sends messages from several REST clients (each with
// seq_no) to devices connected over MQTT that acknowledge at QoS 1, kills
// the server with SIGKILL at random moments and restarts it on the same
// data dir, the clients retrying every unanswered send with the same
// seq_no and body. At the end it counts:
//   - lost: a 200 whose msgid is not found, or that never reaches its
//     device although the device is online;
//   - phantom: a msgid the device received that GET /msg/v1/msg does not
//     know (or that carried two different bodies);
//   - duplicated: one (seq_no, body) known under two msgids.
//
// All must be 0. The server must not send a message before its write is
// durable (store.Store.Barrier); without that it fails within a few cycles.
func TestCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cycles := envInt(t, envCrashCycles, 20)
	clients := envInt(t, envCrashClients, 16)
	devices := envInt(t, envCrashDevices, 8)

	dir := t.TempDir()
	args := []string{"--mqtt.tcp_addr", "127.0.0.1:0"}
	p := startProc(t, dir, args...)
	app := p.createApp(t, "crash")
	names, secrets := createDevices(t, p, app, "crash-", devices)

	l := newCrashLedger()
	// send makes one attempt at r; it reports false when the server is gone.
	send := func(p *proc, r *crashReq) bool {
		st, b, err := p.tryCall(app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
			fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q,"ttl":3600}`, r.seq, r.device, r.body))
		if err != nil {
			return false
		}
		var resp struct{ Msgid int64 }
		if st != 200 || json.Unmarshal(b, &resp) != nil || resp.Msgid == 0 {
			t.Errorf("send %s: %d %s", r.body, st, b)
			return false
		}
		l.answer(t, r, resp.Msgid)
		return true
	}
	connect := func(p *proc) []paho.Client {
		cs := make([]paho.Client, devices)
		for i := range cs {
			dev := names[i]
			cs[i] = connectDevice(t, p.mqtt, app.Key, dev, secrets[i], false, func(m paho.Message) { l.receive(dev, m) })
		}
		return cs
	}
	disconnect := func(cs []paho.Client) {
		for _, c := range cs {
			c.Disconnect(0)
		}
	}
	// unanswered lists client c's sends without a 200 yet.
	pending := make([][]*crashReq, clients)
	nextSeq := make([]int64, clients)
	var totalSends, retries int

	for cycle := range cycles {
		if cycle > 0 {
			p = startProc(t, dir, args...)
		}
		devs := connect(p)
		s, r := crashClients(t, p, pending, send, func(c int) *crashReq {
			nextSeq[c]++
			r := &crashReq{seq: int64(c)*1_000_000 + nextSeq[c], device: names[rand.IntN(devices)]}
			r.body = fmt.Sprintf("c%d-s%d", c, r.seq)
			l.mu.Lock()
			l.reqs[r.body] = r
			l.mu.Unlock()
			return r
		})
		totalSends += s
		retries += r
		disconnect(devs)
		if t.Failed() {
			return
		}
	}

	// The last start: every client sends its unanswered sends until
	// answered, and the devices stay online until each 200 is delivered.
	p = startProc(t, dir, args...)
	devs := connect(p)
	defer disconnect(devs)
	retries += retryPending(t, p, pending, send, func(r *crashReq) string { return r.body })
	undelivered := l.waitDelivered(30 * time.Second)

	// The checker asks the restarted server about each msgid once.
	exists := msgExists(t, p, app)
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, phantom, duplicated := l.lost(exists, undelivered), l.phantoms(exists), l.duplicated()
	t.Logf("%d cycles, %d clients, %d devices: %d sends, %d retries, %d msgids delivered; lost %d, phantom %d, duplicated under two ids %d",
		cycles, clients, devices, totalSends, retries, len(l.received), len(lost), len(phantom), len(duplicated))
	reportProblems(t, lost, phantom, duplicated)
}

// crashClient is one client of a kill -9 cycle: it first sends again
// what the last crash left unanswered (*pending), then sends next() until
// stop is closed or a send fails, leaving the send that failed in
// *pending. It returns the new sends and the retries it made.
func crashClient[R any](pending *[]R, send func(R) bool, next func() R, stop <-chan struct{}) (sends, retries int) {
	for len(*pending) > 0 {
		if !send((*pending)[0]) {
			return sends, retries
		}
		*pending = (*pending)[1:]
		retries++
	}
	for {
		select {
		case <-stop:
			return sends, retries
		default:
		}
		r := next()
		sends++
		if !send(r) {
			*pending = append(*pending, r)
			return sends, retries
		}
	}
}

// crashClients runs a kill -9 cycle's clients against p, each as
// crashClient with pending[c]. p is killed after 100 to 700 ms;
// crashClients returns once every client has stopped, with the new sends
// and the retries made.
func crashClients[R any](t *testing.T, p *proc, pending [][]R, send func(*proc, R) bool, next func(c int) R) (sends, retries int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex // guards sends and retries
	for c := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, r := crashClient(&pending[c], func(r R) bool { return send(p, r) }, func() R { return next(c) }, stop)
			mu.Lock()
			sends, retries = sends+s, retries+r
			mu.Unlock()
		}()
	}
	time.Sleep(time.Duration(100+rand.IntN(600)) * time.Millisecond)
	must(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	close(stop)
	wg.Wait()
	return sends, retries
}
