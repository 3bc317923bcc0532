package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// Settings of the kill -9 tests under telemetry load; a longer run:
//
//	make crash-loop-events   (DEVMSG_EVENTS_CRASH_CYCLES=100)
const (
	envEventCrashCycles  = "DEVMSG_EVENTS_CRASH_CYCLES"  // kill -9 cycles (default 4 on one node, 2 on two)
	envEventCrashDevices = "DEVMSG_EVENTS_CRASH_DEVICES" // devices publishing (default 8)
)

// reading is one telemetry publish of the crash tests: the device's
// reading number and which attempt at it this is. A device that gets no
// PUBACK publishes the same reading again with the next attempt number, so
// the log may hold a reading twice (once per attempt: the device's retry,
// at least once) but never one attempt twice.
type reading struct {
	Seq int `json:"seq"`
	Try int `json:"try"`
}

func (r reading) less(o reading) bool { return r.Seq < o.Seq || (r.Seq == o.Seq && r.Try < o.Try) }

// upEvent is a device.up of a crash test as pull and webhooks give it.
type upEvent struct {
	id      string
	device  string
	reading reading
}

func decodeUps(t *testing.T, body []byte) []upEvent {
	t.Helper()
	var evs []struct {
		ID         string `json:"id"`
		Type       string `json:"type"`
		DeviceName string `json:"device_name"`
		Data       struct {
			Topic   string `json:"topic"`
			Payload string `json:"payload"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &evs); err != nil {
		t.Errorf("events are not a JSON array: %v: %s", err, badJSONContext(t, body, err))
		return nil
	}
	var out []upEvent
	for _, e := range evs {
		if e.Type != "device.up" {
			continue
		}
		var r reading
		if e.Data.Topic != "up/telemetry" || json.Unmarshal([]byte(e.Data.Payload), &r) != nil {
			t.Errorf("event %s: topic %q payload %q", e.ID, e.Data.Topic, e.Data.Payload)
			continue
		}
		out = append(out, upEvent{id: e.ID, device: e.DeviceName, reading: r})
	}
	return out
}

// hookSink is the app's event webhook in the crash tests: it answers the
// echostr check and keeps every device.up it is POSTed, in arrival order.
type hookSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []upEvent
	post   int
	secret string // the app's signing secret, set by addEventHook
}

// badJSONContext returns the bytes of body around a syntax error, quoted,
// and keeps the whole body in a file it names, for a rare failure to be
// read whole afterwards.
func badJSONContext(t *testing.T, body []byte, err error) string {
	t.Helper()
	at := 0
	var se *json.SyntaxError
	if errors.As(err, &se) {
		at = int(se.Offset)
	}
	from, to := max(at-200, 0), min(at+100, len(body))
	where := "not kept"
	if f, ferr := os.CreateTemp("", "devmsg-bad-events-*.json"); ferr == nil {
		_, _ = f.Write(body)
		_ = f.Close()
		where = f.Name()
	}
	return fmt.Sprintf("%d bytes, the error at offset %d; bytes %d to %d: %q; whole body in %s", len(body), at, from, to, body[from:to], where)
}

func newHookSink(t *testing.T) *hookSink {
	h := &hookSink{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			_, _ = io.WriteString(w, req.URL.Query().Get("echostr"))
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			// The sender was killed mid-body: a cut-off attempt, which
			// the next node delivers again.
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		secret := h.secret
		h.mu.Unlock()
		signed := signedAs(secret, req.Header, body)
		switch {
		case !json.Valid(body):
			// Whether the sender signed these very bytes tells a body
			// made wrong by the server from one changed on the way.
			t.Errorf("a webhook POST is not JSON; its signature %s", signed)
		case secret != "" && signed != signedOK:
			t.Errorf("a webhook POST's signature %s", signed)
		}
		evs := decodeUps(t, body)
		h.mu.Lock()
		h.got = append(h.got, evs...)
		h.post++
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

const signedOK = "verifies: the sender signed these bytes"

// signedAs says whether the Standard Webhooks signature in header is
// that of body under secret (whsec_...).
func signedAs(secret string, header http.Header, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || secret == "" {
		return fmt.Sprintf("was not checked (signing secret %q)", secret)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", header.Get("webhook-id"), header.Get("webhook-timestamp"), body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return signedOK
		}
	}
	return "does not verify: the bytes changed after the sender signed them"
}

func (h *hookSink) events() []upEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]upEvent(nil), h.got...)
}

// telemetryLedger is what the devices saw acknowledged, across every cycle.
type telemetryLedger struct {
	mu        sync.Mutex
	acked     map[string]map[reading]bool // device → acknowledged readings
	publishes int
	retries   int
}

func (l *telemetryLedger) ack(device string, r reading) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acked[device] == nil {
		l.acked[device] = map[reading]bool{}
	}
	l.acked[device][r] = true
}

// crashDevice is a device of the crash tests and its next reading.
type crashDevice struct {
	name, secret string
	next         reading
}

// publishUntil connects d to broker with the SDK and publishes readings
// at QoS 1, 40 a second, each once the last was acknowledged, until stop
// is closed; a reading without a PUBACK is published again, as the next
// attempt, by the next call.
func (l *telemetryLedger) publishUntil(t *testing.T, broker, appKey string, d *crashDevice, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	dev, err := sdk.Connect(ctx, sdk.Config{Broker: "tcp://" + broker, AppKey: appKey, DeviceName: d.name, DeviceSecret: d.secret})
	if err != nil {
		return // the server died while connecting
	}
	defer dev.Close()
	// Under the server's limit of 50 publishes a second per device, past
	// which it refuses them.
	pace := time.NewTicker(25 * time.Millisecond)
	defer pace.Stop()
	for ctx.Err() == nil {
		select {
		case <-pace.C:
		case <-ctx.Done():
			return
		}
		payload, _ := json.Marshal(d.next)
		err := dev.PublishUp(ctx, "telemetry", payload, 1)
		l.mu.Lock()
		l.publishes++
		l.mu.Unlock()
		switch {
		case err == nil:
			l.ack(d.name, d.next)
			d.next = reading{Seq: d.next.Seq + 1}
		case errors.Is(err, sdk.ErrNotAcknowledged):
			d.next.Try++
			l.mu.Lock()
			l.retries++
			l.mu.Unlock()
			return
		default:
			t.Errorf("%s: publish: %v", d.name, err)
			return
		}
	}
}

// pullUps reads every device.up of the app's log through the pull API.
func pullUps(t *testing.T, p *proc, app testApp) []upEvent {
	t.Helper()
	var all []upEvent
	after := ""
	for {
		q := url.Values{"limit": {"1000"}, "types": {"device.up"}}
		if after != "" {
			q.Set("after", after)
		}
		st, b := p.call(t, app.Key, app.MasterSecret, "GET", "/event/v1/events?"+q.Encode(), "")
		var page struct {
			Events json.RawMessage `json:"events"`
			Next   string          `json:"next"`
		}
		if st != 200 || json.Unmarshal(b, &page) != nil {
			t.Fatalf("pull after %q: %d %s", after, st, b)
		}
		evs := decodeUps(t, page.Events)
		all = append(all, evs...)
		if page.Next == after || page.Next == "" {
			return all
		}
		after = page.Next
	}
}

// checkTelemetry compares what the devices had acknowledged with the log
// (pull) and what the webhook received. Lost (an acknowledged reading
// missing), a reading attempt twice in the log, and a device's events out
// of order fail the test; repeats at the webhook and readings stored
// twice because the device retried them are counted and logged.
func checkTelemetry(t *testing.T, l *telemetryLedger, log, hook []upEvent) {
	t.Helper()
	type seen struct {
		log, hook map[reading]int
	}
	byDev := map[string]*seen{}
	get := func(d string) *seen {
		if byDev[d] == nil {
			byDev[d] = &seen{log: map[reading]int{}, hook: map[reading]int{}}
		}
		return byDev[d]
	}
	var logDup, hookDup, retried, misordered int
	last := map[string]reading{}
	for _, e := range log {
		s := get(e.device)
		s.log[e.reading]++
		if s.log[e.reading] > 1 {
			logDup++
			t.Errorf("%s reading %+v twice in the log (the second as event %s)", e.device, e.reading, e.id)
		}
		if prev, ok := last[e.device]; ok && !prev.less(e.reading) {
			misordered++
			t.Errorf("log: %s reading %+v (event %s) after %+v", e.device, e.reading, e.id, prev)
		}
		last[e.device] = e.reading
	}
	clear(last)
	for _, e := range hook {
		s := get(e.device)
		s.hook[e.reading]++
		if s.hook[e.reading] > 1 {
			hookDup++
			continue // a webhook may repeat a batch it was not sure of
		}
		if prev, ok := last[e.device]; ok && !prev.less(e.reading) {
			misordered++
			t.Errorf("webhook: %s reading %+v (event %s) first arrived after %+v", e.device, e.reading, e.id, prev)
		}
		last[e.device] = e.reading
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var acked, lostLog, lostHook int
	for dev, rs := range l.acked {
		for r := range rs {
			acked++
			if get(dev).log[r] == 0 {
				lostLog++
				t.Errorf("%s reading %+v was acknowledged, not in the log", dev, r)
			}
			if get(dev).hook[r] == 0 {
				lostHook++
				t.Errorf("%s reading %+v was acknowledged, never reached the webhook", dev, r)
			}
		}
	}
	for _, s := range byDev {
		for r := range s.log {
			if r.Try > 0 {
				if _, ok := s.log[reading{Seq: r.Seq, Try: r.Try - 1}]; ok {
					retried++
				}
			}
		}
	}
	t.Logf("%d publishes, %d acknowledged, %d retried after a crash; log: %d device.up, lost %d, stored twice %d, "+
		"readings stored again by a device's retry %d; webhook: %d received, lost %d, repeated %d; out of order %d",
		l.publishes, acked, l.retries, len(log), lostLog, logDup, retried, len(hook), lostHook, hookDup, misordered)
}

// addEventHook adds the sink as an event webhook of app for device.up.
func addEventHook(t *testing.T, p *proc, app testApp, h *hookSink) {
	t.Helper()
	st, b := p.call(t, "admin", "durability-admin", "POST", "/admin/v1/apps/"+app.Key+"/events/webhooks",
		fmt.Sprintf(`{"url":%q,"types":["device.up"]}`, h.srv.URL+"/events"))
	if st != 200 {
		t.Fatalf("add event webhook: %d %s", st, b)
	}
	st, b = p.call(t, "admin", "durability-admin", "GET", "/admin/v1/apps/"+app.Key+"/events/webhooks", "")
	var list struct {
		SigningSecret string `json:"signing_secret"`
	}
	if st != 200 || json.Unmarshal(b, &list) != nil || list.SigningSecret == "" {
		t.Fatalf("list event webhooks: %d %s", st, b)
	}
	h.mu.Lock()
	h.secret = list.SigningSecret
	h.mu.Unlock()
}

// createCrashDevices creates n devices named prefix0.. on p.
func createCrashDevices(t *testing.T, p *proc, app testApp, prefix string, n int) []*crashDevice {
	t.Helper()
	var req []string
	for i := range n {
		req = append(req, fmt.Sprintf(`{"name":"%s%d"}`, prefix, i))
	}
	st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(req, ",")+`]}`)
	var cr struct {
		Resp []struct {
			DeviceName   string `json:"device_name"`
			DeviceSecret string `json:"device_secret"`
		}
	}
	if st != 200 || json.Unmarshal(body, &cr) != nil || len(cr.Resp) != n {
		t.Fatalf("create devices: %d %s", st, body)
	}
	devs := make([]*crashDevice, n)
	for i, r := range cr.Resp {
		devs[i] = &crashDevice{name: r.DeviceName, secret: r.DeviceSecret}
	}
	return devs
}

// waitHook waits until the webhook has every acknowledged reading.
func waitHook(t *testing.T, l *telemetryLedger, h *hookSink) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		have := map[string]map[reading]bool{}
		for _, e := range h.events() {
			if have[e.device] == nil {
				have[e.device] = map[reading]bool{}
			}
			have[e.device][e.reading] = true
		}
		missing := 0
		l.mu.Lock()
		for dev, rs := range l.acked {
			for r := range rs {
				if !have[dev][r] {
					missing++
				}
			}
		}
		l.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventCrashArgs lets the event webhook reach the test's loopback sink.
var eventCrashArgs = []string{"--callback.allow_custom_ports=true", "--callback.allowed_networks=127.0.0.0/8"}

// TestCrashLoopTelemetry has devices publish QoS 1 telemetry through the
// SDK, each reading carrying its number and attempt, while the server is
// killed with SIGKILL at random moments and restarted on the same data
// dir. After the last restart every acknowledged reading must be in the
// log (pull) and must have reached the app's event webhook, each
// device's events in publish order, and no publish stored twice.
func TestCrashLoopTelemetry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cycles := envInt(t, envEventCrashCycles, 4)
	devices := envInt(t, envEventCrashDevices, 8)
	dir := t.TempDir()
	args := append([]string{"--mqtt.tcp_addr", "127.0.0.1:0"}, eventCrashArgs...)
	p := startProc(t, dir, args...)
	app := p.createApp(t, "crash-events")
	devs := createCrashDevices(t, p, app, "tel-", devices)
	hook := newHookSink(t)
	addEventHook(t, p, app, hook)
	l := &telemetryLedger{acked: map[string]map[reading]bool{}}

	for cycle := range cycles {
		if cycle > 0 {
			p = startProc(t, dir, args...)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, d := range devs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.publishUntil(t, p.mqtt, app.Key, d, stop)
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		must(t, p.cmd.Process.Signal(syscall.SIGKILL))
		_ = p.cmd.Wait()
		// The devices go on a little, as real ones would: publishes
		// to the dead server wait for a PUBACK that never comes.
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	p = startProc(t, dir, args...)
	waitHook(t, l, hook)
	checkTelemetry(t, l, pullUps(t, p, app), hook.events())
}

// TestCrashTelemetryTwoNodes is the Redis variant: two nodes on one
// redis-server, the devices connected to one of them while it is killed
// with SIGKILL; they move to the other node and go on publishing there,
// and a new node takes the killed one's place for the next cycle, where
// the roles swap.
// Every acknowledged reading must be in the shared log and reach the
// webhook, each device's events in publish order across the move.
func TestCrashTelemetryTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rdb := redisForTest(t, "--appendfsync", "always")
	cycles := envInt(t, envEventCrashCycles, 2) // each cycle swaps the nodes: 2 moves both ways
	devices := envInt(t, envEventCrashDevices, 8)
	nodes := [2]*proc{startNode(t, rdb, 1, eventCrashArgs...), startNode(t, rdb, 2, eventCrashArgs...)}
	app := nodes[0].createApp(t, "crash-events-redis")
	devs := createCrashDevices(t, nodes[0], app, "mover-", devices)
	hook := newHookSink(t)
	addEventHook(t, nodes[0], app, hook)
	l := &telemetryLedger{acked: map[string]map[reading]bool{}}

	for cycle := range cycles {
		victim, other := cycle%2, 1-cycle%2
		// On the node about to die, then, without a pause, on the other.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, d := range devs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.publishUntil(t, nodes[victim].mqtt, app.Key, d, stop)
				l.publishUntil(t, nodes[other].mqtt, app.Key, d, stopAfter(400*time.Millisecond))
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		must(t, nodes[victim].cmd.Process.Signal(syscall.SIGKILL))
		_ = nodes[victim].cmd.Wait()
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
		// A new node in its place: one restarted with the dead node's
		// id would first wait out the dead one's heartbeat (10 s).
		nodes[victim] = startNode(t, rdb, 3+cycle, eventCrashArgs...)
	}
	waitHook(t, l, hook)
	checkTelemetry(t, l, pullUps(t, nodes[0], app), hook.events())
}

// stopAfter returns a channel closed after d.
func stopAfter(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}
