package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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

func newEventReceiver(t *testing.T) *eventReceiver {
	r := &eventReceiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			io.WriteString(w, req.URL.Query().Get("echostr"))
			return
		}
		body, _ := io.ReadAll(req.Body)
		var evs []wireEvent
		if err := json.Unmarshal(body, &evs); err != nil {
			t.Errorf("webhook body is not a JSON array of events: %v: %s", err, body)
		}
		r.mu.Lock()
		r.batches = append(r.batches, batch{at: time.Now(), header: req.Header.Clone(), body: body})
		r.events = append(r.events, evs...)
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *eventReceiver) url(path string) string { return r.srv.URL + path }

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
	rcv.mu.Lock()
	types := []string{}
	for _, e := range rcv.events {
		types = append(types, e.Type)
	}
	rcv.mu.Unlock()
	if want := []string{"device.created", "device.created", "device.deleted", "device.created"}; !slices.Equal(types, want) {
		t.Fatalf("types %v, want %v", types, want)
	}
}

func (r *eventReceiver) got() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}
