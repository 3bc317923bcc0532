package restapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// pulled is the body of a pull's 200.
type pulled struct {
	Events []events.Wire `json:"events"`
	Next   string        `json:"next"`
	Newest string        `json:"newest"`
}

func (e *env) pull(query string) pulled {
	e.t.Helper()
	r := e.call("GET", "/event/v1/events"+query, nil)
	r.wantOK(e.t)
	var p pulled
	r.decode(e.t, &p)
	if p.Events == nil {
		e.t.Fatalf("events is not an array: %s", r.body)
	}
	return p
}

// appendEvents appends events of the test app's devices straight to the
// log, as mqttapi.API would.
func (e *env) appendEvents(evs ...store.Event) []store.Event {
	e.t.Helper()
	out, err := e.st.AppendEvents(context.Background(), evs)
	if err != nil {
		e.t.Fatalf("append events: %v", err)
	}
	return out
}

func (e *env) up(device, payload string) store.Event {
	return events.New(events.TypeUp, e.app.Key, device, time.Now(), events.UpData("up/temp", 1, []byte(payload)))
}

// types lists the events' types and devices as "type:device".
func kinds(evs []events.Wire) string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.Type+":"+ev.DeviceName)
	}
	return strings.Join(s, " ")
}

func TestPullEvents(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001", "dev-0002")
	e.appendEvents(e.up("dev-0001", "21.5"), e.up("dev-0002", "\xff\x00"))
	e.appendEvents(events.New(events.TypeEvent, e.app.Key, "dev-0001", time.UnixMilli(1767225600000),
		events.Report{Name: "overheat", Content: "92C", Type: 1, Time: 1767225600000}))

	all := e.pull("")
	if got, want := kinds(all.Events), "device.created:dev-0001 device.created:dev-0002 device.up:dev-0001 device.up:dev-0002 device.event:dev-0001"; got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	var prev int64
	for _, ev := range all.Events {
		id, err := strconv.ParseInt(ev.ID, 10, 64)
		if err != nil || id <= prev {
			t.Fatalf("id %q after %d: not an increasing decimal string", ev.ID, prev)
		}
		prev = id
		if ev.AppKey != e.app.Key || ev.Time <= 0 {
			t.Errorf("event %+v: app_key or time wrong", ev)
		}
	}
	if all.Next != all.Events[len(all.Events)-1].ID {
		t.Errorf("next %s, want the last id %s", all.Next, all.Events[len(all.Events)-1].ID)
	}
	if d := string(all.Events[3].Data); d != `{"topic":"up/temp","qos":1,"payload":"/wA=","encoding":"base64"}` {
		t.Errorf("binary telemetry data %s", d)
	}
	if d, want := string(all.Events[4].Data), `{"name":"overheat","content":"92C","type":1,"time":1767225600000,"report_seq":`+all.Events[4].ID+`}`; d != want {
		t.Errorf("event report data %s, want %s", d, want)
	}

	t.Run("cursor and limit page through the log", func(t *testing.T) {
		var ids []string
		after := ""
		for range 10 {
			p := e.pull("?limit=2&after=" + after)
			if len(p.Events) == 0 {
				break
			}
			if len(p.Events) > 2 {
				t.Fatalf("limit 2 gave %d events", len(p.Events))
			}
			for _, ev := range p.Events {
				ids = append(ids, ev.ID)
			}
			after = p.Next
		}
		var want []string
		for _, ev := range all.Events {
			want = append(want, ev.ID)
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("paged ids %v, want %v", ids, want)
		}
		if p := e.pull("?after=" + all.Next); len(p.Events) != 0 || p.Next != all.Next {
			t.Errorf("pull at the end: %+v, want no events and next %s", p, all.Next)
		}
	})
	t.Run("types", func(t *testing.T) {
		p := e.pull("?types=device.up,device.event")
		if got := kinds(p.Events); got != "device.up:dev-0001 device.up:dev-0002 device.event:dev-0001" {
			t.Errorf("types filter gave %s", got)
		}
		if p.Next != all.Next {
			t.Errorf("next %s, want %s: the filtered read examined every event", p.Next, all.Next)
		}
	})
	t.Run("device_name", func(t *testing.T) {
		p := e.pull("?device_name=dev-0002")
		if got := kinds(p.Events); got != "device.created:dev-0002 device.up:dev-0002" {
			t.Errorf("device filter gave %s", got)
		}
		p = e.pull("?device_name=dev-0001&types=device.created")
		if got := kinds(p.Events); got != "device.created:dev-0001" {
			t.Errorf("device and type filters gave %s", got)
		}
		if p := e.pull("?device_name=no-such-dev"); len(p.Events) != 0 {
			t.Errorf("unknown device gave %s", kinds(p.Events))
		}
	})
	t.Run("wait with nothing new answers empty when the wait is over", func(t *testing.T) {
		p := e.pull("?wait=0.2&after=" + all.Next)
		if len(p.Events) != 0 || p.Next != all.Next {
			t.Errorf("got %+v", p)
		}
	})
}

func TestPullLongPoll(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	start := e.pull("")
	type result struct {
		p       pulled
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		t0 := time.Now()
		r := e.call("GET", "/event/v1/events?wait=20&types=device.up&after="+start.Next, nil)
		var p pulled
		_ = json.Unmarshal(r.body, &p)
		done <- result{p, time.Since(t0)}
	}()
	// Events that do not match the filter do not end the wait.
	time.Sleep(100 * time.Millisecond)
	e.appendEvents(events.New(events.TypeOnline, e.app.Key, "dev-0001", time.Now(), events.Online{ClientIP: "127.0.0.1", Protocol: "5", Transport: "tcp"}))
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("the pull returned on an event it filters out: %+v", r.p)
	default:
	}
	want := e.appendEvents(e.up("dev-0001", "1"))[0]
	select {
	case r := <-done:
		if len(r.p.Events) != 1 || r.p.Events[0].ID != strconv.FormatInt(want.ID, 10) {
			t.Fatalf("long-poll gave %+v, want the appended event %d", r.p, want.ID)
		}
		if r.elapsed >= 20*time.Second {
			t.Fatalf("long-poll returned after its wait (%s), not on the append", r.elapsed)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long-poll did not return on the append")
	}
}

// TestPullLongPollClientGone checks that a long-poll whose client goes
// away ends at once: it holds no goroutine or store wait beyond its
// request.
func TestPullLongPollClientGone(t *testing.T) {
	e := newEnv(t)
	ended := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.handler.ServeHTTP(w, r)
		ended <- struct{}{}
	}))
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/event/v1/events?wait=30", nil)
	req.SetBasicAuth(e.app.Key, e.app.MasterSecret)
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-ended:
		t.Fatal("the long-poll answered before its wait")
	default:
	}
	cancel()
	<-errc
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still runs 10 s after its client went away (wait was 30 s)")
	}
}

// TestPullLongPollOutlivesServerTimeouts: a wait longer than the server's
// read and write timeouts still gets its answer (devmsg serve has 30 s of
// each, and a wait may be 30 s).
func TestPullLongPollOutlivesServerTimeouts(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewUnstartedServer(e.handler)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	// HEAD answers like GET, through the same long wait.
	for _, method := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(method, srv.URL+"/event/v1/events?wait=1.2", nil)
		req.SetBasicAuth(e.app.Key, e.app.MasterSecret)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s long-poll over the server's timeouts: %v", method, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || method == "GET" && !strings.Contains(string(body), `"events":[]`) {
			t.Fatalf("%s long-poll answer %d %s %v", method, resp.StatusCode, body, err)
		}
	}
}

func TestPullTrimmedCursor(t *testing.T) {
	e := newEnv(t)
	var evs []store.Event
	for i := range 5 {
		evs = append(evs, e.up("dev-0001", strconv.Itoa(i)))
	}
	got := e.appendEvents(evs...)
	n, err := e.st.TrimEvents(context.Background(), e.app.Key, 0, 2)
	if err != nil || n != 3 {
		t.Fatalf("trim: %d %v", n, err)
	}
	oldest := got[3].ID
	r := e.call("GET", fmt.Sprintf("/event/v1/events?after=%d", got[0].ID), nil)
	r.wantError(t, 400, 1003, "after", fmt.Sprintf("oldest kept event is %d", oldest), fmt.Sprintf("after=%d", oldest-1))
	// The way on that the message gives works, and so does no cursor.
	if p := e.pull(fmt.Sprintf("?after=%d", oldest-1)); len(p.Events) != 2 || p.Events[0].ID != strconv.FormatInt(oldest, 10) {
		t.Errorf("pull from the oldest gave %+v", p)
	}
	if p := e.pull(""); len(p.Events) != 2 || p.Events[0].ID != strconv.FormatInt(oldest, 10) {
		t.Errorf("pull with no cursor gave %+v", p)
	}
}

// TestPullCursorBeyondNewest: a cursor above every id the log handed out
// would skip the events to come up to it, silently; it is refused naming
// the newest id, which every answer carries, and stays the newest when
// trims empty the log.
func TestPullCursorBeyondNewest(t *testing.T) {
	e := newEnv(t)
	if p := e.pull(""); p.Newest != "0" || p.Next != "0" {
		t.Errorf("empty log: newest %q next %q, want \"0\"", p.Newest, p.Next)
	}
	got := e.appendEvents(e.up("dev-0001", "1"), e.up("dev-0001", "2"), e.up("dev-0001", "3"))
	newest := strconv.FormatInt(got[2].ID, 10)
	if p := e.pull("?limit=1"); p.Newest != newest || p.Next != strconv.FormatInt(got[0].ID, 10) {
		t.Errorf("limit=1: newest %q next %q, want %s and %d", p.Newest, p.Next, newest, got[0].ID)
	}
	for _, after := range []string{strconv.FormatInt(got[2].ID+1, 10), "100000", "9223372036854775807"} {
		e.call("GET", "/event/v1/events?wait=5&after="+after, nil).wantError(t, 400, 1003,
			"after "+after+" is beyond the newest event id "+newest, "after="+newest)
	}
	if p := e.pull("?after=" + newest); len(p.Events) != 0 || p.Next != newest || p.Newest != newest {
		t.Errorf("after the newest: %+v", p)
	}
	if _, err := e.st.TrimEvents(context.Background(), e.app.Key, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.TrimEvents(context.Background(), e.app.Key, time.Now().Add(time.Hour).UnixMilli(), 0); err != nil {
		t.Fatal(err)
	}
	if p := e.pull("?after=" + newest); len(p.Events) != 0 || p.Newest != newest {
		t.Errorf("emptied log, after the newest: %+v", p)
	}
	e.call("GET", "/event/v1/events?after=100000", nil).wantError(t, 400, 1003, "newest event id "+newest)
}

func TestPullBadParams(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ query, field string }{
		{"after=abc", "after"},
		{"after=-1", "after"},
		{"after=+5", "after"},
		{"after=99999999999999999999", "after"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=ten", "limit"},
		{"limit=", "limit"},
		{"wait=31", "wait"},
		{"wait=-1", "wait"},
		{"wait=NaN", "wait"},
		{"wait=soon", "wait"},
		{"types=device.up,device.bogus", "device.bogus"},
		{"types=device.up,", "types"},
		{"device_name=a", "device_name"},
		{"device_name=bad%20name", "device_name"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			e.call("GET", "/event/v1/events?"+tc.query, nil).wantError(t, 400, 1003, tc.field)
		})
	}
	t.Run("limit and wait at their bounds", func(t *testing.T) {
		e.pull("?limit=1&wait=0")
		e.pull("?limit=1000&after=0&types=&device_name=")
	})
}

func TestPullIsPerApp(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	e.appendEvents(e.up("dev-0001", "a's"))
	other := e.createApp("other-app")
	oc := credsOf(other)
	pullAs := func(query string) pulled {
		r := e.do("GET", "/event/v1/events"+query, nil, &oc)
		r.wantOK(t)
		var p pulled
		r.decode(t, &p)
		return p
	}
	if p := pullAs(""); len(p.Events) != 0 || p.Next != "0" {
		t.Errorf("app B sees %+v of app A's log", p)
	}
	if p := pullAs("?device_name=dev-0001"); len(p.Events) != 0 {
		t.Errorf("app B sees app A's device: %s", kinds(p.Events))
	}
	// App A's ids mean nothing in B's log, which has none: refused.
	e.do("GET", "/event/v1/events?after=1&wait=0.2", nil, &oc).wantError(t, 400, 1003, "after 1 is beyond the newest event id 0")
	if p := e.pull(""); len(p.Events) != 2 {
		t.Errorf("app A sees %s", kinds(p.Events))
	}
}

func TestPullAuthAndRateLimit(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/event/v1/events", nil, nil).wantError(t, 401, 1004)
	e.do("GET", "/event/v1/events", nil, &creds{e.app.Key, "wrong"}).wantError(t, 401, 1004)
	adm := adminCreds()
	e.do("GET", "/event/v1/events", nil, &adm).wantError(t, 401, 1004)
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"query":1}`, &adm).wantOK(t)
	// The app cache holds the old limit for up to a second.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.call("GET", "/event/v1/events", nil)
		if r.status == 429 {
			r.wantError(t, 429, 2002, "query")
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("pull is not limited by the query category")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
