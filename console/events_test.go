package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// appendEvents stores events in the app's log through the domain service,
// as the broker's ingest and the device service do; it returns their ids.
func (e *env) appendEvents(evs ...store.Event) []int64 {
	e.t.Helper()
	out, err := e.st.AppendEvents(context.Background(), evs)
	if err != nil {
		e.t.Fatalf("append events: %v", err)
	}
	ids := make([]int64, len(out))
	for i, ev := range out {
		ids[i] = ev.ID
	}
	return ids
}

func upEvent(a app, device, topic, payload string) store.Event {
	return events.New(events.TypeUp, a.Key, device, time.Now(), events.UpData(topic, 1, []byte(payload)))
}

// sseMsg is one Server-Sent Events message; a comment is not one.
type sseMsg struct{ ID, Event, Data string }

// sseStream is an open event stream of the console.
type sseStream struct {
	t      *testing.T
	cancel context.CancelFunc
	resp   *http.Response
	msgs   chan sseMsg
}

// stream opens path (a console event stream) with the browser's cookies;
// lastID, when set, is sent as Last-Event-ID like a reconnecting browser.
func (b *browser) stream(path, lastID string) *sseStream {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", b.e.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		cancel()
		b.t.Fatalf("open stream %s: %v", path, err)
	}
	s := &sseStream{t: b.t, cancel: cancel, resp: resp, msgs: make(chan sseMsg, 1000)}
	b.t.Cleanup(s.close)
	if resp.StatusCode != 200 {
		return s
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		b.t.Fatalf("stream content type %q", ct)
	}
	go func() {
		defer close(s.msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var m sseMsg
		var data []string
		any := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if any {
					m.Data = strings.Join(data, "\n")
					s.msgs <- m
				}
				m, data, any = sseMsg{}, nil, false
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id: "):
				m.ID, any = line[4:], true
			case strings.HasPrefix(line, "event: "):
				m.Event, any = line[7:], true
			case strings.HasPrefix(line, "data: "):
				data, any = append(data, line[6:]), true
			}
		}
	}()
	return s
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next message with an event (skipping id-only ones).
func (s *sseStream) next() sseMsg {
	s.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatal("the stream ended")
			}
			if m.Event != "" {
				return m
			}
		case <-timeout:
			s.t.Fatal("no event within 10s")
		}
	}
}

// quiet fails if an event arrives within d.
func (s *sseStream) quiet(d time.Duration) {
	s.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-s.msgs:
			if ok && m.Event != "" {
				s.t.Fatalf("unexpected event %+v", m)
			}
			if !ok {
				return
			}
		case <-timeout:
			return
		}
	}
}

var rowAttrRE = regexp.MustCompile(`<tr class="event" data-id="(\d+)" data-type="([^"]*)" data-device="([^"]*)"`)

// row is a streamed or rendered event row's id, type and device.
type row struct{ ID, Type, Device string }

func parseRow(t *testing.T, html string) row {
	t.Helper()
	m := rowAttrRE.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("not an event row: %s", html)
	}
	return row{m[1], m[2], m[3]}
}

// streamPath reads the live view's stream URL and start cursor from the
// page at path.
func (b *browser) streamPath(path string) (stream string, after int64) {
	b.t.Helper()
	p := b.get(path)
	p.want(b.t, 200, `id="events-table"`)
	m := regexp.MustCompile(`data-stream="([^"]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		b.t.Fatalf("no stream URL:\n%s", p.body)
	}
	stream = html.UnescapeString(m[1])
	u, err := url.Parse(stream)
	if err != nil {
		b.t.Fatal(err)
	}
	after, err = strconv.ParseInt(u.Query().Get("after"), 10, 64)
	if err != nil {
		b.t.Fatalf("stream URL %s: %v", stream, err)
	}
	return stream, after
}

// TestEventsLiveView streams an app's events as they are appended: the
// view starts after the newest event, rows come newest-last over SSE with
// their ids, device data is escaped, filters by type and device are the
// API's, and a reconnect with Last-Event-ID resumes after that id.
func TestEventsLiveView(t *testing.T) {
	e := newEnv(t)
	e.c.streamWait = 300 * time.Millisecond
	a := e.createApp("live")
	old := e.appendEvents(upEvent(a, "dev-1", "up", "before the page"), upEvent(a, "dev-1", "up", "also before"))

	b := e.browser()
	b.loginApp(a)
	path, after := b.streamPath("/console/apps/" + a.Key + "/events")
	if after != old[1] {
		t.Fatalf("the view starts after %d, want the newest event %d", after, old[1])
	}
	s := b.stream(path, "")
	ids := e.appendEvents(
		upEvent(a, "dev-1", "up/temp", `<script>window.pwned=1</script>`),
		events.New(events.TypeOnline, a.Key, "dev-2", time.Now(), events.Online{ClientIP: "10.0.0.9", Protocol: "5", Transport: "tcp"}),
	)
	m := s.next()
	if m.Event != "devmsg-event" || m.ID != fmt.Sprint(ids[0]) {
		t.Fatalf("first message %+v, want event %d", m, ids[0])
	}
	if r := parseRow(t, m.Data); r != (row{fmt.Sprint(ids[0]), events.TypeUp, "dev-1"}) {
		t.Errorf("row %+v", r)
	}
	if strings.Contains(m.Data, "<script") || !strings.Contains(m.Data, "&lt;script&gt;window.pwned=1&lt;/script&gt;") {
		t.Errorf("the payload is not escaped as text:\n%s", m.Data)
	}
	if m := s.next(); parseRow(t, m.Data).Type != events.TypeOnline || !strings.Contains(m.Data, "10.0.0.9") {
		t.Errorf("second row %s", m.Data)
	}

	// Filtered by type and device: the others never come.
	q := url.Values{"type": {events.TypeUp}, "device": {"dev-1"}, "after": {fmt.Sprint(ids[1])}}
	fs := b.stream("/console/apps/"+a.Key+"/events/stream?"+q.Encode(), "")
	more := e.appendEvents(
		upEvent(a, "dev-2", "up", "other device"),
		events.New(events.TypeOffline, a.Key, "dev-1", time.Now(), events.Offline{Reason: events.ReasonKeepalive}),
		upEvent(a, "dev-1", "up", "wanted"),
	)
	if r := parseRow(t, fs.next().Data); r.ID != fmt.Sprint(more[2]) {
		t.Fatalf("filtered stream sent %+v, want only event %d", r, more[2])
	}
	fs.quiet(300 * time.Millisecond)

	// Events the filter passes over still move the browser's cursor (an
	// SSE id without an event), so a reconnect does not read them again.
	skipped := e.appendEvents(upEvent(a, "dev-2", "up", "not for this view"))
	for moved := false; !moved; {
		select {
		case m := <-fs.msgs:
			if m.Event != "" {
				t.Fatalf("the filtered stream sent %+v", m)
			}
			moved = m.ID == fmt.Sprint(skipped[0])
		case <-time.After(5 * time.Second):
			t.Fatalf("the filtered stream did not move its id past event %d", skipped[0])
		}
	}

	// A reconnecting browser sends the last id it got: the stream goes on
	// after it, not from the page's start.
	r := b.stream(path, fmt.Sprint(more[0]))
	for _, want := range more[1:] {
		if got := parseRow(t, r.next().Data).ID; got != fmt.Sprint(want) {
			t.Fatalf("resumed stream sent %s, want %d", got, want)
		}
	}
}

// TestEventsNewest: the live view starts after the newest event, which
// one pull's "newest" gives, for logs of many lengths, and after the
// newest id still when retention has emptied the log (reading forward
// would find no event there and start from 0).
func TestEventsNewest(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("newest")
	b := e.browser()
	b.loginApp(a)
	var newest int64
	for _, n := range []int{0, 1, 99, 1051} {
		evs := make([]store.Event, n)
		for i := range evs {
			evs[i] = upEvent(a, "dev-0", "up", "x")
		}
		if n > 0 {
			ids := e.appendEvents(evs...)
			newest = ids[n-1]
		}
		if _, after := b.streamPath("/console/apps/" + a.Key + "/events"); after != newest {
			t.Fatalf("after appending %d: the view starts after %d, want %d", n, after, newest)
		}
	}
	if _, err := e.st.TrimEvents(context.Background(), a.Key, time.Now().Add(time.Hour).UnixMilli(), 0); err != nil {
		t.Fatal(err)
	}
	if _, after := b.streamPath("/console/apps/" + a.Key + "/events"); after != newest {
		t.Fatalf("emptied log: the view starts after %d, want the newest id %d", after, newest)
	}
}

// TestEventsStreamSkipsAhead: a stream far behind (here from the start
// of a log of 1,200 events) sends as many rows as the page keeps, then
// skips to the newest event with a notice, and goes on from there.
func TestEventsStreamSkipsAhead(t *testing.T) {
	e := newEnv(t)
	e.c.streamWait = 300 * time.Millisecond
	a := e.createApp("firehose")
	evs := make([]store.Event, 1200)
	for i := range evs {
		evs[i] = upEvent(a, "dev-0", "up", strconv.Itoa(i))
	}
	ids := e.appendEvents(evs...)
	b := e.browser()
	b.loginApp(a)
	s := b.stream("/console/apps/"+a.Key+"/events/stream?after=0", "")
	rows := 0
	m := s.next()
	for ; m.Event == "devmsg-event"; m = s.next() {
		rows++
	}
	newest := fmt.Sprint(ids[len(ids)-1])
	if m.Event != "devmsg-skip" || m.ID != newest || !strings.Contains(m.Data, "skipped ahead to event "+newest) {
		t.Fatalf("after %d rows the stream sent %+v, want a skip to %s", rows, m, newest)
	}
	if rows != streamCatchUp {
		t.Errorf("%d rows before the skip, want %d", rows, streamCatchUp)
	}
	late := e.appendEvents(upEvent(a, "dev-0", "up", "late"))
	if m := s.next(); m.ID != fmt.Sprint(late[0]) {
		t.Fatalf("after the skip the stream sent %+v, want event %d", m, late[0])
	}
}

// TestEventsStreamEnds: a stream stops working when the browser goes
// away, when the session signs out, and when the console closes.
func TestEventsStreamEnds(t *testing.T) {
	e := newEnv(t)
	e.c.streamWait = 300 * time.Millisecond
	a := e.createApp("ends")
	b := e.browser()
	b.loginApp(a)
	path, _ := b.streamPath("/console/apps/" + a.Key + "/events")
	open := func(want int64) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%d open streams", want), func() bool { return e.c.streams.Load() == want })
	}

	s := b.stream(path, "")
	open(1)
	s.close() // the tab is closed
	open(0)

	s = b.stream(path, "")
	open(1)
	b.get("/console/apps/" + a.Key) // for the CSRF token
	b.post("/console/logout", nil)
	if m := s.next(); m.Event != "devmsg-error" || !strings.Contains(m.Data, "session ended") {
		t.Fatalf("after sign-out the stream sent %+v", m)
	}
	open(0)
	if s := b.stream(path, ""); s.resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a stream without a session: %d", s.resp.StatusCode)
	}

	b.loginApp(a)
	s = b.stream(path, "")
	open(1)
	e.c.Close()
	open(0)
	if _, ok := <-s.msgs; ok {
		// drain: the stream must end, not hang
		for range s.msgs {
		}
	}
}

// TestEventsStreamRateLimited: a pull refused over the app's query rate
// limit ends the response without an error event, so the browser
// reconnects by itself (after the retry delay the stream set) instead of
// the view stopping.
func TestEventsStreamRateLimited(t *testing.T) {
	e := newEnv(t)
	e.c.streamWait = 300 * time.Millisecond
	a := e.createApp("limited")
	e.apiCall("admin", adminPassword, "PUT", "/admin/v1/apps/"+a.Key+"/ratelimits", map[string]int{"query": 1}, nil)
	b := e.browser()
	b.loginApp(a)
	s := b.stream("/console/apps/"+a.Key+"/events/stream?after=0", "")
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				return // ended: the browser will reconnect
			}
			if m.Event != "" {
				t.Fatalf("over the rate limit the stream sent %+v", m)
			}
		case <-timeout:
			t.Fatal("the stream went on over the rate limit")
		}
	}
}

// TestEventsStreamOutlivesWriteTimeout: devmsg serve's HTTP server has a
// WriteTimeout, counted from the start of a request; the stream moves
// its write deadline on, so an event long after the start still arrives.
func TestEventsStreamOutlivesWriteTimeout(t *testing.T) {
	e := newEnv(t)
	e.srv.Config.WriteTimeout = 300 * time.Millisecond
	e.c.streamWait = 300 * time.Millisecond
	a := e.createApp("slow")
	b := e.browser()
	b.loginApp(a)
	path, _ := b.streamPath("/console/apps/" + a.Key + "/events")
	s := b.stream(path, "")
	time.Sleep(1500 * time.Millisecond) // past the WriteTimeout, past an empty pull
	ids := e.appendEvents(upEvent(a, "dev-0", "up", "late"))
	if got := s.next().ID; got != fmt.Sprint(ids[0]) {
		t.Fatalf("got id %s, want %d", got, ids[0])
	}
}

// TestEventsStreamScope: an app owner streams only their own app.
func TestEventsStreamScope(t *testing.T) {
	e := newEnv(t)
	a, other := e.createApp("mine"), e.createApp("theirs")
	b := e.browser()
	b.loginApp(a)
	if s := b.stream("/console/apps/"+other.Key+"/events/stream", ""); s.resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another app's stream: %d", s.resp.StatusCode)
	}
	b.get("/console/apps/"+other.Key+"/events").want(t, http.StatusNotFound)
}

// TestEventsPageWithoutScript: with ?after= the page lists the events
// after it at once, newest first, escaped, with the link to newer ones;
// a cursor the log no longer has shows the API's message.
func TestEventsPageWithoutScript(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("noscript")
	ids := e.appendEvents(
		upEvent(a, "dev-1", "up", "one"),
		events.New(events.TypeEvent, a.Key, "dev-1", time.Now(), events.Report{Name: "<b>door</b>", Content: strings.Repeat("long ", 100), Type: 1, Time: 1}),
		upEvent(a, "dev-2", "up", "three"),
	)
	b := e.browser()
	b.loginApp(a)
	p := b.get(fmt.Sprintf("/console/apps/%s/events?after=%d&type=device.up&type=device.event", a.Key, ids[0]))
	p.want(t, 200, "&lt;b&gt;door&lt;/b&gt;", `class="fold event-fold"`)
	if p.has("<b>door") {
		t.Error("the report's name is not escaped")
	}
	rows := rowAttrRE.FindAllStringSubmatch(p.body, -1)
	if len(rows) != 2 || rows[0][1] != fmt.Sprint(ids[2]) || rows[1][1] != fmt.Sprint(ids[1]) {
		t.Fatalf("rows %v, want ids %d then %d", rows, ids[2], ids[1])
	}
	if !p.has(fmt.Sprintf("after=%d", ids[2])) {
		t.Errorf("the newer link does not go on after %d:\n%s", ids[2], p.body)
	}
	if !strings.Contains(p.text("events-table"), `"report_seq": `+fmt.Sprint(ids[1])) {
		t.Errorf("the event report's data lacks its report_seq:\n%s", p.text("events-table"))
	}
}

func TestUnescapeHTML(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":"\u003cb\u003e \u0026"}`, `{"a":"<b> &"}`},
		{`{"a":"\\u003c"}`, `{"a":"\\u003c"}`}, // a typed backslash-u, kept
		{`{"a":"\"\u00e9\u003C"}`, `{"a":"\"\u00e9<"}`},
		{`{"a":"x\\"}`, `{"a":"x\\"}`},
	} {
		got := string(unescapeHTML([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tc.in, got, tc.want)
		}
		var v any
		if err := json.Unmarshal([]byte(got), &v); err != nil {
			t.Errorf("%s is no longer JSON: %v", got, err)
		}
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEventsOneLine: each event is one line, its telemetry payload
// decoded (text as sent, JSON also pretty-printed when expanded, bytes in
// hex), the whole event one click away.
func TestEventsOneLine(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("oneline")
	ids := e.appendEvents(
		upEvent(a, "dev-1", "up/temp", `{"celsius":21.5,"note":"<i>warm</i>"}`),
		upEvent(a, "dev-1", "up", "\x01\x02\xff"),
		events.New(events.TypeEvent, a.Key, "dev-1", time.Now(), events.Report{Name: "door", Content: strings.Repeat("long ", 200), Type: 1, Time: 1}),
	)
	b := e.browser()
	b.loginApp(a)
	p := b.get(fmt.Sprintf("/console/apps/%s/events?after=%d", a.Key, ids[0]-1))
	lines := regexp.MustCompile(`<code class="event-line">((?:<span class="event-topic">[^<]*</span> )?[^<]*)</code>`).FindAllStringSubmatch(p.body, -1)
	if len(lines) != 3 {
		t.Fatalf("%d one-line summaries, want 3:\n%s", len(lines), p.body)
	}
	want := []string{
		`{&#34;name&#34;:&#34;door&#34;,&#34;content&#34;:&#34;long long`,
		`<span class="event-topic">up</span> 01 02 ff (3 bytes)`,
		`<span class="event-topic">up/temp</span> {&#34;celsius&#34;:21.5,&#34;note&#34;:&#34;&lt;i&gt;warm&lt;/i&gt;&#34;}`,
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i][1], w) {
			t.Errorf("line %d reads %q, want it to start %q", i, lines[i][1], w)
		}
		if strings.Contains(lines[i][1], "\n") || len(lines[i][1]) > 2*lineBytes {
			t.Errorf("line %d is not one short line: %q", i, lines[i][1])
		}
	}
	if strings.Contains(p.body, `\&#34;celsius`) || strings.Contains(p.body, `\u003c`) {
		t.Error("the payload is shown as escaped JSON")
	}
	if !p.has(`<pre class="event-payload">{` + "\n" + `  &#34;celsius&#34;: 21.5,`) {
		t.Errorf("the JSON payload is not pretty-printed in the expansion:\n%s", p.body)
	}
	if n := strings.Count(p.body, `<details class="fold event-fold">`); n != 3 {
		t.Errorf("%d expandable rows, want 3", n)
	}
}
