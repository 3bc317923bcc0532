package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventReceiver is a developer's event webhook: it answers the echostr
// check and keeps every POST, answering 200.
type eventReceiver struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	batches []batch
	events  []wireEvent
}

// wireEvent is an event as a receiver decodes it.
type wireEvent struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	AppKey     string          `json:"app_key"`
	DeviceName string          `json:"device_name"`
	Time       int64           `json:"time"`
	Data       json.RawMessage `json:"data"`
}

func newEventReceiver(t *testing.T) *eventReceiver { return newEventReceiverAt(t, "") }

// newEventReceiverAt is newEventReceiver listening on addr (host:port), or
// on a loopback port when addr is "".
func newEventReceiverAt(t *testing.T, addr string) *eventReceiver {
	r := &eventReceiver{t: t}
	r.srv = serveTestHTTP(t, addr, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			io.WriteString(w, req.URL.Query().Get("echostr"))
			return
		}
		body, _ := io.ReadAll(req.Body)
		var evs []wireEvent
		if req.URL.Path != "/jiot" { // a jiot body is an object, read by the test
			if err := json.Unmarshal(body, &evs); err != nil {
				t.Errorf("webhook body is not a JSON array of events: %v: %s", err, body)
			}
		}
		r.mu.Lock()
		r.batches = append(r.batches, batch{at: time.Now(), header: req.Header.Clone(), body: body})
		r.events = append(r.events, evs...)
		r.mu.Unlock()
	}))
	return r
}

func (r *eventReceiver) url(path string) string { return r.srv.URL + path }

// all returns the events received, in order.
func (r *eventReceiver) all() []wireEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// devices returns the device names of the events received, in order.
func (r *eventReceiver) devices() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.DeviceName)
	}
	return out
}

// waitDevices waits for events of want's length, and checks they are of
// those devices, in that order.
func (r *eventReceiver) waitDevices(want ...string) {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for len(r.devices()) < len(want) {
		if time.Now().After(deadline) {
			r.t.Fatalf("webhook got events of %v, want %v", r.devices(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.devices(); !slices.Equal(got, want) {
		r.t.Fatalf("webhook got events of %v, want %v", got, want)
	}
}

// The real server delivers to an event webhook added through the admin
// API: signed, of the chosen types only, and after a restart from where
// it stopped, with nothing sent twice and nothing lost.
func TestEventWebhookDeliveryAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data_dir", dir, "--events.linger", "50ms"}
	f := callbackFleet(t, args...)
	rcv := newEventReceiver(t)
	f.createDevice("before") // made before the webhook: not pushed
	f.restOK("POST", "/admin/v1/apps/"+demoKey+"/events/webhooks",
		fmt.Sprintf(`{"url":%q,"types":["device.created","device.deleted"]}`, rcv.url("/events")), nil)
	f.createDevice("hook-1")
	f.createDevice("hook-2")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/hook-1", `{"flag":1}`, nil) // device.disabled: not chosen
	f.restOK("DELETE", "/admin/v1/apps/"+demoKey+"/devices/hook-2", "", nil)
	rcv.waitDevices("hook-1", "hook-2", "hook-2")
	secret := f.signingSecret()
	for _, b := range rcv.got() {
		verifySignature(t, secret, b)
	}

	f.s.stop(t)
	f = callbackFleet(t, args...)
	f.createDevice("hook-3")
	rcv.waitDevices("hook-1", "hook-2", "hook-2", "hook-3")
	types := []string{}
	for _, e := range rcv.all() {
		types = append(types, e.Type)
	}
	if want := []string{"device.created", "device.created", "device.deleted", "device.created"}; !slices.Equal(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
}

func (r *eventReceiver) got() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// webhooksDelivering reads a node's devmsg_event_webhooks_delivering.
func (f *fleet) webhooksDelivering() string {
	f.t.Helper()
	_, b := f.rest("GET", "/metrics", "")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "devmsg_event_webhooks_delivering "); ok {
			return v
		}
	}
	return ""
}

// In a cluster one node delivers the webhooks, whichever node took the
// admin call and made the events; when it stops, another goes on from
// the shared cursor: every event once, in order.
func TestEventWebhookCluster(t *testing.T) {
	rdb := redisForTest(t)
	node := func(id int) *fleet {
		return callbackFleet(t, "--store.type=redis", "--store.redis.addrs="+rdb.Addr, fmt.Sprintf("--node_id=%d", id),
			"--events.linger", "50ms")
	}
	n1 := node(1) // first: it takes the lease
	n2 := node(2)
	rcv := newEventReceiver(t)
	n2.restOK("POST", "/admin/v1/apps/"+demoKey+"/events/webhooks",
		fmt.Sprintf(`{"url":%q,"types":["device.created"]}`, rcv.url("/events")), nil)
	n1.createDevice("cl-1")
	n2.createDevice("cl-2")
	n1.createDevice("cl-3")
	rcv.waitDevices("cl-1", "cl-2", "cl-3")
	if d1, d2 := n1.webhooksDelivering(), n2.webhooksDelivering(); d1 != "1" || d2 != "0" {
		t.Fatalf("webhooks delivering: node 1 %q, node 2 %q; want 1 and 0", d1, d2)
	}

	n1.s.stop(t) // releases the lease; node 2 takes it
	n2.createDevice("cl-4")
	n2.createDevice("cl-5")
	rcv.waitDevices("cl-1", "cl-2", "cl-3", "cl-4", "cl-5")
	if d2 := n2.webhooksDelivering(); d2 != "1" {
		t.Fatalf("node 2 delivers %q webhooks after node 1 stopped, want 1", d2)
	}
}

// Devices' publishes reach both kinds of webhook: telemetry in the JSON
// array of events, an event report in the source API's jiot body, one
// per POST, each signed.
func TestEventWebhookFormatsFromDevices(t *testing.T) {
	f := callbackFleet(t, "--events.linger", "50ms")
	up, jiot := newEventReceiver(t), newEventReceiver(t)
	hooks := "/admin/v1/apps/" + demoKey + "/events/webhooks"
	f.restOK("POST", hooks, fmt.Sprintf(`{"url":%q,"types":["device.up"]}`, up.url("/events")), nil)
	f.restOK("POST", hooks, fmt.Sprintf(`{"url":%q,"format":"jiot"}`, jiot.url("/jiot")), nil)
	d := f.mustConnect("sensor-1", f.createDevice("sensor-1"))
	d.publish(t, "up/temp", "21.5")
	d.publish(t, "event", `{"name":"door","content":"opened","type":1,"time":1795384293000}`)
	d.publish(t, "event", `{"name":"battery","content":"low","type":2,"time":1795384294000}`)

	up.waitDevices("sensor-1")
	var data struct {
		Topic, Payload, Encoding string
		QoS                      int
	}
	e := up.all()[0]
	json.Unmarshal(e.Data, &data)
	if e.Type != "device.up" || data.Topic != "up/temp" || data.Payload != "21.5" || data.Encoding != "utf8" || data.QoS != 1 {
		t.Fatalf("telemetry event %+v", e)
	}

	deadline := time.Now().Add(15 * time.Second)
	for len(jiot.got()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	posts := jiot.got()
	if len(posts) != 2 {
		t.Fatalf("jiot webhook got %d POSTs, want one per event report (2)", len(posts))
	}
	secret := f.signingSecret()
	var seqs []int64
	for i, want := range []string{
		`{"product_key":"demo-app-key","report_seq":%s,"device_name":"sensor-1","event":{"name":"door","content":"opened","time":1795384293000,"type":1}}`,
		`{"product_key":"demo-app-key","report_seq":%s,"device_name":"sensor-1","event":{"name":"battery","content":"low","time":1795384294000,"type":2}}`,
	} {
		p := posts[i]
		verifySignature(t, secret, p)
		var body struct {
			ReportSeq int64 `json:"report_seq"`
		}
		json.Unmarshal(p.body, &body)
		seqs = append(seqs, body.ReportSeq)
		if want := fmt.Sprintf(want, fmt.Sprint(body.ReportSeq)); string(p.body) != want {
			t.Fatalf("jiot POST %d:\n%s\nwant\n%s", i, p.body, want)
		}
		if id := p.header.Get("webhook-id"); id != fmt.Sprint(body.ReportSeq) {
			t.Fatalf("jiot POST %d: webhook-id %q, want the report_seq %d", i, id, body.ReportSeq)
		}
	}
	if seqs[0] <= 0 || seqs[1] <= seqs[0] {
		t.Fatalf("report_seq %v: want increasing", seqs)
	}
}
