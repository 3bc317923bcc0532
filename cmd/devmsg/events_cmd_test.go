package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// pullDevice reads the demo app's events of one device and types through
// the pull API, from the start.
func (f *fleet) pullDevice(device, types string) []wireEvent {
	f.t.Helper()
	var page struct {
		Events []wireEvent `json:"events"`
	}
	q := url.Values{"device_name": {device}, "types": {types}, "limit": {"1000"}}
	f.restOK("GET", "/event/v1/events?"+q.Encode(), "", &page)
	return page.Events
}

// eventsFleet is a fleet whose event webhooks and `devmsg events
// --forward-to` may reach a loopback receiver.
func eventsFleet(t *testing.T) *fleet {
	return newFleet(t, "--callback.allow_custom_ports=true", "--callback.allowed_networks=127.0.0.0/8")
}

// TestDeviceSDKTelemetry publishes telemetry and event reports with the
// SDK: each acknowledged publish is in the log as the device sent it, and
// what breaks the protocol's limits is refused before it is sent.
func TestDeviceSDKTelemetry(t *testing.T) {
	t.Parallel()
	f := eventsFleet(t)
	secret := f.createDevice("tel-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := sdk.Connect(ctx, sdk.Config{Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: "tel-1", DeviceSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	for _, bad := range []struct {
		name string
		err  error
	}{
		{"wildcard suffix", d.PublishUp(ctx, "a/+", []byte("x"), 1)},
		{"suffix over 128 bytes", d.PublishUp(ctx, strings.Repeat("s", 129), []byte("x"), 1)},
		{"payload over 64 KiB", d.PublishUp(ctx, "", make([]byte, 65537), 1)},
		{"qos 2", d.PublishUp(ctx, "", []byte("x"), 2)},
		{"empty name", d.ReportEvent(ctx, "", "x", sdk.Info)},
		{"name over 32 bytes", d.ReportEvent(ctx, strings.Repeat("n", 33), "", sdk.Info)},
		{"content over 2048 bytes", d.ReportEvent(ctx, "n", strings.Repeat("c", 2049), sdk.Info)},
		{"level 3", d.ReportEvent(ctx, "n", "", sdk.Level(3))},
	} {
		if bad.err == nil || errors.Is(bad.err, sdk.ErrNotAcknowledged) {
			t.Errorf("%s: %v, want a refusal before sending", bad.name, bad.err)
		}
	}

	binary := []byte{0xff, 0x00, 0xfe}
	must(t, d.PublishUp(ctx, "telemetry", []byte(`{"temp":21.5}`), 1))
	must(t, d.PublishUp(ctx, "", binary, 1))
	must(t, d.ReportEvent(ctx, "overheat", "above 80 °C", sdk.Alert))
	must(t, d.PublishUp(ctx, "a/b", make([]byte, 65536), 1)) // the largest payload
	// Acknowledged means stored: the events are there at once, in order.
	evs := f.pullDevice("tel-1", "device.up,device.event")
	type up struct {
		Topic    string `json:"topic"`
		QoS      int    `json:"qos"`
		Payload  string `json:"payload"`
		Encoding string `json:"encoding"`
	}
	if len(evs) != 4 {
		t.Fatalf("events after four acknowledged publishes: %+v", evs)
	}
	var u [4]up
	for i, e := range evs {
		_ = json.Unmarshal(e.Data, &u[i])
	}
	if evs[0].Type != "device.up" || u[0] != (up{"up/telemetry", 1, `{"temp":21.5}`, "utf8"}) {
		t.Errorf("telemetry event %s %s", evs[0].Type, evs[0].Data)
	}
	if u[1] != (up{"up", 1, base64.StdEncoding.EncodeToString(binary), "base64"}) {
		t.Errorf("binary telemetry event %s", evs[1].Data)
	}
	var r struct {
		Name, Content string
		Type          int64
	}
	if err := json.Unmarshal(evs[2].Data, &r); err != nil || evs[2].Type != "device.event" || r.Name != "overheat" || r.Content != "above 80 °C" || r.Type != 1 {
		t.Errorf("event report %s %s", evs[2].Type, evs[2].Data)
	}
	if u[3].Topic != "up/a/b" || len(u[3].Payload) != 65536 {
		t.Errorf("largest telemetry: topic %q, %d bytes", u[3].Topic, len(u[3].Payload))
	}
	// QoS 0 returns once written; the event follows.
	must(t, d.PublishUp(ctx, "q0", []byte("fire and forget"), 0))
	waitFor(t, 5*time.Second, "the QoS 0 event", func() bool { return len(f.pullDevice("tel-1", "device.up")) == 4 })

	// A publish that cannot be sent is one to send again, whichever way
	// it failed: here the client is not connected any more.
	d.Close()
	for range 20 {
		if err := d.PublishUp(ctx, "telemetry", []byte("x"), 1); !errors.Is(err, sdk.ErrNotAcknowledged) {
			t.Fatalf("publish after Close: %v, want ErrNotAcknowledged", err)
		}
	}
}

// TestEventsCommand runs `devmsg events` against a live log: it prints
// each event as its JSON, forwards each page to a receiver with the
// webhook's headers and a signature that verifies, goes on with events
// published while it runs, and retries a page the receiver refused until
// it is taken, never skipping it.
func TestEventsCommand(t *testing.T) {
	t.Parallel()
	f := eventsFleet(t)
	secret := f.createDevice("cli-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := sdk.Connect(ctx, sdk.Config{Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: "cli-1", DeviceSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := 1; i <= 3; i++ {
		must(t, d.PublishUp(ctx, "telemetry", fmt.Appendf(nil, `{"n":%d}`, i), 1))
	}

	recv := newFwdReceiver(t)
	runCtx, stop := context.WithCancel(ctx)
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"events", "--api", "http://" + f.s.addr, "--app-key", demoKey, "--master-secret", demoSecret,
			"--device", "cli-1", "--types", "device.up", "--json", "--forward-to", recv.srv.URL + "/hook"}, stdout, stderr)
	}()
	waitFor(t, 10*time.Second, "the first three events forwarded", func() bool { return len(forwarded(t, recv)) == 3 })

	// The receiver refuses for a while: the next event is retried, then taken.
	recv.status.Store(500)
	must(t, d.PublishUp(ctx, "telemetry", []byte(`{"n":4}`), 1))
	waitFor(t, 10*time.Second, "a refused forward", func() bool {
		for _, b := range recv.got() {
			if b.status == 500 {
				return true
			}
		}
		return false
	})
	recv.status.Store(200)
	waitFor(t, 10*time.Second, "the fourth event forwarded", func() bool { return len(forwarded(t, recv)) >= 4 })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("events: %v\n%s", err, stderr)
	}

	evs := forwarded(t, recv)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for i, e := range evs[:4] {
		if e.Type != "device.up" || e.DeviceName != "cli-1" || e.AppKey != demoKey || !strings.Contains(string(e.Data), fmt.Sprintf(`{\"n\":%d}`, i+1)) {
			t.Errorf("forwarded event %d: %+v %s", i, e, e.Data)
		}
	}
	// Printed once each, before each forward attempt of its page.
	var printed []wireEvent
	for _, l := range lines {
		var e wireEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("printed line %q: %v", l, err)
		}
		printed = append(printed, e)
	}
	if len(printed) != 4 || printed[3].ID != evs[3].ID {
		t.Errorf("printed %d events %+v, want the 4 forwarded", len(printed), printed)
	}
	for _, b := range recv.got() {
		verifySignature(t, f.signingSecret(), batch{header: b.header, body: b.body})
		var first []wireEvent
		_ = json.Unmarshal(b.body, &first)
		if user, pass, ok := basicAuth(b.header.Get("Authorization")); !ok || user != demoKey || pass != demoSecret {
			t.Errorf("forward without the app's Basic credentials: %q", b.header.Get("Authorization"))
		}
		if len(first) == 0 || b.header.Get("webhook-id") != first[0].ID {
			t.Errorf("webhook-id %q, first event %+v", b.header.Get("webhook-id"), first)
		}
	}
	if want := "resume with --after " + evs[3].ID; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
}

// fwdReceiver is a developer's event endpoint: it answers the echostr
// check and records every POST, answering with status (200 unless set).
type fwdReceiver struct {
	srv    *httptest.Server
	status atomic.Int32
	mu     sync.Mutex
	posts  []fwdPost
}

type fwdPost struct {
	status int // the receiver's answer
	header http.Header
	body   []byte
}

func newFwdReceiver(t *testing.T) *fwdReceiver {
	r := &fwdReceiver{}
	r.status.Store(200)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			_, _ = io.WriteString(w, req.URL.Query().Get("echostr"))
			return
		}
		body, _ := io.ReadAll(req.Body)
		st := int(r.status.Load())
		r.mu.Lock()
		r.posts = append(r.posts, fwdPost{status: st, header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		w.WriteHeader(st)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fwdReceiver) got() []fwdPost {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fwdPost(nil), r.posts...)
}

// forwarded returns the events the receiver took (answered 2xx), in order.
func forwarded(t *testing.T, r *fwdReceiver) []wireEvent {
	t.Helper()
	var out []wireEvent
	for _, b := range r.got() {
		var evs []wireEvent
		if err := json.Unmarshal(b.body, &evs); err != nil {
			t.Fatalf("forwarded body is not a JSON array of events: %v: %s", err, b.body)
		}
		if b.status == 200 {
			out = append(out, evs...)
		}
	}
	return out
}

func basicAuth(h string) (user, pass string, ok bool) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "Basic "))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}

// TestEventsCommandFlags checks what `devmsg events` refuses before it
// calls the API, and how it prints an event as text.
func TestEventsCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--master-secret", "s"}, "--app-key and --master-secret are required"},
		{[]string{"--app-key", "k", "--master-secret", "s", "--types", "device.up,device.nope"}, `unknown event type "device.nope"`},
		{[]string{"--app-key", "k", "--master-secret", "s", "--limit", "1001"}, "--limit 1001"},
		{[]string{"--app-key", "k", "--master-secret", "s", "--after", "x"}, `--after "x"`},
		{[]string{"--app-key", "k", "--master-secret", "s", "--forward-to", "localhost:3000"}, "want an http:// or https:// URL"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Setenv("DEVMSG_MASTER_SECRET", "")
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"events"}, tc.args...), &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	var out bytes.Buffer
	printEvent(&out, json.RawMessage(`{"id":"42","type":"device.up","app_key":"k","device_name":"s-1","time":1764028800123,"data":{"topic": "up", "qos": 1}}`), false)
	if want := "2025-11-25T00:00:00.123Z  42       device.up         s-1                  {\"topic\":\"up\",\"qos\":1}\n"; out.String() != want {
		t.Errorf("text line\n%q, want\n%q", out.String(), want)
	}
}

// TestSimTelemetry runs `devmsg sim --telemetry`: each simulated device
// publishes numbered readings to up/telemetry.
func TestSimTelemetry(t *testing.T) {
	t.Parallel()
	f := eventsFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--broker", "tcp://" + f.s.mqtt["tcp"], "--app-key", demoKey, "--count", "2", "--prefix", "telsim-",
			"--create", "--api", "http://" + f.s.addr, "--master-secret", demoSecret, "--report-every", "0", "--telemetry", "100ms"}, out, out)
	}()
	for _, dev := range []string{"telsim-0001", "telsim-0002"} {
		waitFor(t, 10*time.Second, dev+" readings", func() bool { return len(f.pullDevice(dev, "device.up")) >= 3 })
		for i, e := range f.pullDevice(dev, "device.up")[:3] {
			var u struct{ Topic, Payload string }
			var r struct {
				Temp *float64
				Seq  int
			}
			if json.Unmarshal(e.Data, &u) != nil || u.Topic != "up/telemetry" || json.Unmarshal([]byte(u.Payload), &r) != nil || r.Temp == nil || r.Seq != i+1 {
				t.Errorf("%s reading %d: %s", dev, i, e.Data)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sim: %v\n%s", err, out)
	}
}

// TestEventsCommandTrimmedCursor: a cursor older than the log is told on
// stderr and the tail goes on from the oldest kept event, with the
// server's answers as the pull API gives them.
func TestEventsCommandTrimmedCursor(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		queries = append(queries, req.URL.Query().Get("after"))
		mu.Unlock()
		switch req.URL.Query().Get("after") {
		case "3":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":1003,"message":"after is older than the event log: the oldest kept event is 7"}}`)
		case "":
			io.WriteString(w, `{"events":[{"id":"7","type":"device.up","app_key":"k","device_name":"d","time":1,"data":{}}],"next":"7"}`)
		default:
			<-req.Context().Done() // a long-poll with nothing new
		}
	}))
	defer api.Close()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"events", "--api", api.URL, "--app-key", "k", "--master-secret", "s", "--after", "3", "--json"}, stdout, stderr)
	}()
	waitFor(t, 5*time.Second, "the oldest kept event printed", func() bool { return strings.Contains(stdout.String(), `"id":"7"`) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "the oldest kept event is 7; going on from the oldest kept event") {
		t.Errorf("stderr %q", stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queries) < 3 || queries[0] != "3" || queries[1] != "" || queries[2] != "7" {
		t.Errorf("pulls after %q, want 3, then the oldest, then 7", queries)
	}
}

// TestEventsCommandCursorBeyondNewest: a cursor beyond the log's newest
// id stops the tail with the server's message; going on from the oldest
// event, as for a trimmed cursor, would repeat the whole log.
func TestEventsCommandCursorBeyondNewest(t *testing.T) {
	var pulls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		pulls.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"code":1003,"message":"after 100000 is beyond the newest event id 11 (a cursor is an id a pull returned; pull with after=11, or without after, to read on)"}}`)
	}))
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"events", "--api", api.URL, "--app-key", "k", "--master-secret", "s", "--after", "100000", "--json"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "beyond the newest event id 11") || pulls.Load() != 1 {
		t.Fatalf("error %v after %d pulls, want the refusal after one\n%s", err, pulls.Load(), out.String())
	}
}
