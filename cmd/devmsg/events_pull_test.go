package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// pulledEvent is an event as a pull returns it.
type pulledEvent struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	AppKey     string          `json:"app_key"`
	DeviceName string          `json:"device_name"`
	Time       int64           `json:"time"`
	Data       json.RawMessage `json:"data"`
}

type pullAnswer struct {
	Events []pulledEvent `json:"events"`
	Next   string        `json:"next"`
}

func (f *fleet) pull(query string) pullAnswer {
	f.t.Helper()
	var p pullAnswer
	f.restOK("GET", "/event/v1/events"+query, "", &p)
	return p
}

// TestPullWholeProgram drives every kind of event through the real
// server, as a device and a backend would, and pulls them: the device's
// lifecycle over REST and the admin API, its presence, telemetry, event
// reports and property reports over MQTT. A long-poll waiting for
// telemetry gets it once the device's QoS 1 publish is acknowledged.
// (Run with -v to see every event as pulled: docs/events.md's samples.)
func TestPullWholeProgram(t *testing.T) {
	f := newFleet(t)
	secret := f.createDevice("dev-0001")
	start := f.pull("")
	if len(start.Events) != 1 || start.Events[0].Type != "device.created" || start.Events[0].DeviceName != "dev-0001" {
		t.Fatalf("after create: %+v", start)
	}

	type result struct {
		p   pullAnswer
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		// Not f.rest: that fails the test from another goroutine.
		st, b := f.restAs(demoKey, demoSecret, "GET", "/event/v1/events?wait=25&types=device.up&after="+start.Next, "")
		var p pullAnswer
		err := json.Unmarshal(b, &p)
		if st != 200 {
			err = fmt.Errorf("status %d: %s", st, b)
		}
		waiting <- result{p, err}
	}()
	d := f.mustConnect("dev-0001", secret)
	sent := time.Now()
	d.publish(t, "up/temp", "21.5") // QoS 1: returns on the PUBACK
	select {
	case r := <-waiting:
		if r.err != nil || len(r.p.Events) != 1 || string(r.p.Events[0].Data) != `{"topic":"up/temp","qos":1,"payload":"21.5","encoding":"utf8"}` {
			t.Fatalf("long-poll: %+v %v", r.p, r.err)
		}
		t.Logf("long-poll answered %s after the publish was sent", time.Since(sent))
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll did not return on the device's telemetry")
	}

	d.publish(t, "up", "\x01\x02\xff")
	d.publish(t, "event", `{"name":"overheat","content":"motor at 92C","type":1}`)
	d.publish(t, "property/report", `{"properties":{"temp":21.5,"mode":"eco"},"sdk_ver":"1.4.0","app_ver":"2.0.1"}`)
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/dev-0001", `{"flag":1}`, nil) // disconnects it
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/dev-0001", `{"flag":0}`, nil)
	f.restOK("DELETE", "/admin/v1/apps/"+demoKey+"/devices/dev-0001", "", nil)

	want := []string{"device.created", "device.online", "device.up", "device.up", "device.event", "property.reported",
		"device.disabled", "device.offline", "device.enabled", "device.deleted"}
	var got []pulledEvent
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		got = f.pull("?limit=100").Events
		if len(got) < len(want) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
		if e.AppKey != demoKey || e.DeviceName != "dev-0001" {
			t.Errorf("event %+v: wrong app or device", e)
		}
		b, _ := json.Marshal(e)
		t.Logf("%s", b)
	}
	// The device is kicked once its disabling is stored: disabled, then
	// offline.
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n got %v\nwant %v", types, want)
	}
	for _, c := range []struct {
		i    int
		data string
	}{
		{3, `{"topic":"up","qos":1,"payload":"AQL/","encoding":"base64"}`},
		{5, `{"version":1,"properties":{"mode":"eco","temp":21.5},"sdk_ver":"1.4.0","app_ver":"2.0.1"}`},
	} {
		if string(got[c.i].Data) != c.data {
			t.Errorf("%s data %s, want %s", got[c.i].Type, got[c.i].Data, c.data)
		}
	}
	if s := string(got[4].Data); !strings.Contains(s, `"name":"overheat","content":"motor at 92C","type":1,"time":`) ||
		!strings.HasSuffix(s, `"report_seq":`+got[4].ID+`}`) {
		t.Errorf("device.event data %s", s)
	}

	// A pull for the deleted device still reads its events; the trim
	// leaves them, being far inside the retention.
	if p := f.pull("?device_name=dev-0001&types=device.deleted"); len(p.Events) != 1 {
		t.Errorf("deleted device's events: %+v", p)
	}

	// Every event was counted once, by type.
	_, metrics := f.rest("GET", "/metrics", "")
	for typ, n := range map[string]int{"device.created": 1, "device.online": 1, "device.up": 2, "device.event": 1,
		"property.reported": 1, "device.disabled": 1, "device.offline": 1, "device.enabled": 1, "device.deleted": 1} {
		if line := fmt.Sprintf("devmsg_events_appended_total{type=%q} %d\n", typ, n); !strings.Contains(string(metrics), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// TestPullAcrossNodes: on Redis the log is shared by every node. A
// long-poll on one node returns the telemetry a device publishes through
// another, and both nodes read the same log.
func TestPullAcrossNodes(t *testing.T) {
	rdb := redisForTest(t)
	node := func(id int) *fleet {
		return newFleet(t, "--store.type=redis", "--store.redis.addrs="+rdb.Addr, fmt.Sprintf("--node_id=%d", id))
	}
	a, b := node(1), node(2)
	secret := a.createDevice("dev-0001")
	start := a.pull("")

	waiting := make(chan pullAnswer, 1)
	go func() {
		st, body := a.restAs(demoKey, demoSecret, "GET", "/event/v1/events?wait=25&types=device.up&after="+start.Next, "")
		var p pullAnswer
		if st == 200 {
			_ = json.Unmarshal(body, &p)
		}
		waiting <- p
	}()
	d := b.mustConnect("dev-0001", secret)
	d.publish(t, "up", "via node 2")
	select {
	case p := <-waiting:
		if len(p.Events) != 1 || !strings.Contains(string(p.Events[0].Data), `"payload":"via node 2"`) {
			t.Fatalf("long-poll on node 1: %+v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a long-poll on node 1 did not see telemetry stored through node 2")
	}
	pa, pb := a.pull(""), b.pull("")
	ja, _ := json.Marshal(pa)
	jb, _ := json.Marshal(pb)
	if string(ja) != string(jb) || len(pa.Events) != 3 {
		t.Errorf("the nodes read different logs:\n%s\n%s", ja, jb)
	}
}
