package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/events"
)

const (
	// eventsPerPage is how many events a page without JavaScript shows.
	eventsPerPage = 100
	// streamBatch is the most events one pull of the live stream reads.
	streamBatch = 100
	// streamCatchUp is how far behind the stream may fall, in events it
	// sends back to back (full pulls), before it skips to the newest
	// event: the page keeps this many rows, so more would only be
	// rendered to be dropped. A browser reconnecting after an hour away
	// from a busy app, or one watching a firehose, gets a notice instead.
	streamCatchUp = 500
	// streamWait is how long one pull of the live stream long-polls; a
	// comment goes to the browser after each empty one, so proxies and
	// the browser see the stream alive.
	streamWait = 25 * time.Second
	// streamWriteBudget is how long one write to the stream may take. The
	// server's WriteTimeout counts from the start of the request and
	// would cut a stream off after it, so the stream sets the deadline
	// afresh before every write.
	streamWriteBudget = 30 * time.Second
	// streamRetry is the reconnection delay the browser is told to use.
	streamRetry = 3 * time.Second
)

// eventFilter is what the live view shows: some types (none means all)
// and one device ("" means all).
type eventFilter struct {
	Types  []string
	Device string
}

// parseEventFilter reads ?type=... (repeated or comma-separated) and
// ?device=. The API checks the values; the console only passes them on.
func parseEventFilter(query url.Values) eventFilter {
	var f eventFilter
	for _, v := range query["type"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !slices.Contains(f.Types, t) {
				f.Types = append(f.Types, t)
			}
		}
	}
	f.Device = strings.TrimSpace(query.Get("device"))
	return f
}

// values returns the filter as the console's own query string.
func (f eventFilter) values() url.Values {
	v := url.Values{}
	for _, t := range f.Types {
		v.Add("type", t)
	}
	if f.Device != "" {
		v.Set("device", f.Device)
	}
	return v
}

// pull is one GET /event/v1/events with the app's credentials.
func (f eventFilter) pull(q *req, after int64, limit int, wait time.Duration) (eventsAnswer, error) {
	v := url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(limit)}}
	if after == 0 {
		v.Del("after") // from the oldest kept event
	}
	if len(f.Types) > 0 {
		v.Set("types", strings.Join(f.Types, ","))
	}
	if f.Device != "" {
		v.Set("device_name", f.Device)
	}
	if wait > 0 {
		v.Set("wait", strconv.FormatFloat(wait.Seconds(), 'f', -1, 64))
	}
	var out eventsAnswer
	err := q.appAPI(http.MethodGet, "/event/v1/events", v, nil, &out)
	return out, err
}

// eventsAnswer is the pull API's answer.
type eventsAnswer apitypes.EventPage

// next is the answer's cursor, or after when it has none.
func (a eventsAnswer) next(after int64) int64 {
	if n, err := strconv.ParseInt(a.Next, 10, 64); err == nil && n > after {
		return n
	}
	return after
}

// unescapeHTML undoes the \u003c, \u003e and \u0026 escapes that Go's JSON
// encoders write for <, > and &, so a payload reads as the device sent it
// (the page escapes it for HTML). Other escapes are kept as they are.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch strings.ToLower(string(b[i+2 : i+6])) {
			case "003c":
				out, i = append(out, '<'), i+5
				continue
			case "003e":
				out, i = append(out, '>'), i+5
				continue
			case "0026":
				out, i = append(out, '&'), i+5
				continue
			}
		}
		out, i = append(out, b[i], b[i+1]), i+1 // an escape pair, kept
	}
	return out
}

type eventsData struct {
	Filter eventFilter
	// Types are the type checkboxes.
	Types []typeChoice
	// Rows are events shown at once, newest first: those after ?after=
	// for a browser without JavaScript.
	Rows []eventRow
	// After is where the stream starts: the newest event when the page
	// was made, or the last of Rows.
	After int64
	// Stream is the URL of the live stream; Newer the page of the events
	// after After, for a browser without JavaScript.
	Stream, Newer string
	// Error is why the events after ?after= could not be shown.
	Error string
}

type typeChoice struct {
	Type    string
	Checked bool
}

// eventsPage is the live event view: the filter form, and the table the
// script fills from the stream, newest on top. With ?after=N it shows the
// events after N at once (what a browser without JavaScript reloads).
func (c *Console) eventsPage(q *req) error {
	query := q.r.URL.Query()
	d := eventsData{Filter: parseEventFilter(query)}
	for _, t := range events.Types {
		d.Types = append(d.Types, typeChoice{t, slices.Contains(d.Filter.Types, t)})
	}
	if s := query.Get("after"); s != "" {
		after, err := strconv.ParseInt(s, 10, 64)
		if err != nil || after < 0 {
			d.Error = "after must be an event id."
			return q.render(http.StatusBadRequest, "events", "Events", "events", d)
		}
		page, err := d.Filter.pull(q, after, eventsPerPage, 0)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
				d.Error = ae.Message
				return q.render(http.StatusBadRequest, "events", "Events", "events", d)
			}
			return err
		}
		for i := len(page.Events) - 1; i >= 0; i-- {
			d.Rows = append(d.Rows, newEventRow(page.Events[i]))
		}
		d.After = page.next(after)
	} else {
		tail, err := c.newestEvent(q)
		if err != nil {
			return err
		}
		d.After = tail
	}
	v := d.Filter.values()
	v.Set("after", strconv.FormatInt(d.After, 10))
	d.Stream = q.consolePath("/events/stream?" + v.Encode())
	d.Newer = q.consolePath("/events?" + v.Encode())
	return q.render(http.StatusOK, "events", eventsTitle(d.Filter), "events", d)
}

func eventsTitle(f eventFilter) string {
	if f.Device != "" {
		return "Events of " + f.Device
	}
	return "Events"
}

// newestEvent returns the id of the app's newest event (0 when the log
// was never written), where the live view starts: the "newest" of one
// pull's answer.
func (c *Console) newestEvent(q *req) (int64, error) {
	var f eventFilter // unfiltered
	p, err := f.pull(q, 0, 1, 0)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p.Newest, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the pull's newest %q: %w", p.Newest, err)
	}
	return n, nil
}

// eventStream serves the live view's Server-Sent Events: every event
// after the cursor (the Last-Event-ID the browser resends when it
// reconnects, else ?after=) that passes the filter, as it arrives. Each
// SSE message is one table row, rendered here by html/template, so the
// one escaping of the device's untrusted data is the page's own; the
// script only inserts it. It reads the log through the pull API with the
// app's credentials, long-polling, and stops when the browser goes away
// or the console closes.
func (c *Console) eventStream(w http.ResponseWriter, r *http.Request) {
	q, ok := c.streamRequest(w, r)
	if !ok {
		return
	}
	after, err := streamCursor(r)
	if err != nil {
		http.Error(w, "the cursor must be an event id", http.StatusBadRequest)
		return
	}
	f := parseEventFilter(r.URL.Query())

	// The pulls run under a context that also ends when the console
	// closes, so a server shutting down is not held by open streams.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(c.closing, cancel)
	defer stop()
	q.r = r.WithContext(ctx)

	c.streams.Add(1)
	defer c.streams.Add(-1)

	send := startStream(w)
	if !send(fmt.Sprintf("retry: %d\n: stream of %s after %d\n\n", streamRetry.Milliseconds(), q.key, after)) {
		return
	}
	st := &eventStreamState{after: after}
	for {
		page, err := f.pull(q, st.after, streamBatch, c.streamWait)
		if ctx.Err() != nil {
			return // the browser went away, or the console closed
		}
		if !c.touch(q.s.id) {
			// Signed out (maybe in another tab) or expired: what the
			// session could see, it no longer may.
			send(sseMessage("", "devmsg-error", "Your session ended. Sign in again."))
			return
		}
		if err != nil {
			c.streamPullFailed(q, send, err)
			return
		}
		out, ok := c.streamRows(q, page)
		if !ok {
			return
		}
		out += st.advance(page)
		if !send(out) {
			return
		}
	}
}

// streamRequest checks the stream's session and app, answering the
// browser itself when it may not have the stream.
func (c *Console) streamRequest(w http.ResponseWriter, r *http.Request) (*req, bool) {
	s, _ := c.session(r)
	if s == nil {
		// EventSource does not follow a sign-in redirect; the script
		// says the session ended.
		http.Error(w, "not signed in", http.StatusUnauthorized)
		return nil, false
	}
	q := &req{c: c, w: w, r: r, s: s, key: r.PathValue("key")}
	if !s.admin && q.key != s.appKey {
		http.Error(w, "not found", http.StatusNotFound)
		return nil, false
	}
	return q, true
}

// streamCursor reads where the stream starts: Last-Event-ID, else
// ?after=, else 0 (the oldest kept event).
func streamCursor(r *http.Request) (int64, error) {
	cursor := r.Header.Get("Last-Event-ID")
	if cursor == "" {
		cursor = r.URL.Query().Get("after")
	}
	if cursor == "" {
		return 0, nil
	}
	after, err := strconv.ParseInt(cursor, 10, 64)
	if err == nil && after < 0 {
		err = fmt.Errorf("negative event id %d", after)
	}
	return after, err
}

// startStream writes the headers of an event stream and returns the
// function that sends to it, false once the browser cannot be written to.
func startStream(w http.ResponseWriter) func(msg string) bool {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must pass each event on at once
	w.WriteHeader(http.StatusOK)
	return func(msg string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteBudget))
		if _, err := io.WriteString(w, msg); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// streamPullFailed ends the stream after a failed pull, telling the
// script when trying again would not help.
func (c *Console) streamPullFailed(q *req, send func(string) bool, err error) {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status != http.StatusTooManyRequests && ae.Status < 500 {
		// A refusal that trying again would not change: a bad
		// filter, a cursor the log no longer has, a rotated
		// secret. The script shows it and stops.
		send(sseMessage("", "devmsg-error", ae.Message))
		return
	}
	// Over the rate limit, or the service failed: end the
	// response; the browser reconnects after streamRetry with
	// the last id it got.
	if ae == nil {
		c.log.Error("console event stream", "app", q.key, "err", err)
	}
}

// streamRows renders the page's events as SSE messages, one table row
// each; false when a row could not be rendered.
func (c *Console) streamRows(q *req, page eventsAnswer) (string, bool) {
	t := c.pages["events"]
	var out strings.Builder
	for _, e := range page.Events {
		var row bytes.Buffer
		if err := t.ExecuteTemplate(&row, "event-row", newEventRow(e)); err != nil {
			c.log.Error("console event stream: render", "app", q.key, "err", err)
			return "", false
		}
		out.WriteString(sseMessage(e.ID, "devmsg-event", row.String()))
	}
	return out.String(), true
}

// eventStreamState is where a stream is in the log.
type eventStreamState struct {
	after  int64 // the cursor of the next pull
	behind int   // events sent back to back in full pulls
}

// advance moves the cursor past the page and returns what goes to the
// browser after the page's rows: the new cursor and a keep-alive when
// nothing matched, a skip notice when the stream fell too far behind.
func (st *eventStreamState) advance(page eventsAnswer) string {
	var out strings.Builder
	next := page.next(st.after)
	if len(page.Events) == 0 {
		// Nothing matched: move the browser's cursor past what was
		// examined (an id alone changes Last-Event-ID without an
		// event), and show the connection is alive.
		if next != st.after {
			out.WriteString("id: " + strconv.FormatInt(next, 10) + "\n\n")
		}
		out.WriteString(": waiting\n\n")
	}
	st.after = next
	if len(page.Events) < streamBatch {
		st.behind = 0
	} else if st.behind += len(page.Events); st.behind >= streamCatchUp {
		// The pull's answer carries the newest id: no second read.
		if newest, err := strconv.ParseInt(page.Newest, 10, 64); err == nil && newest > st.after {
			out.WriteString(sseMessage(strconv.FormatInt(newest, 10), "devmsg-skip", fmt.Sprintf(
				"Events came faster than this view shows them: it skipped ahead to event %d. The ones in between are in the log: filter the view, or pull them.", newest)))
			st.after = newest
		}
		st.behind = 0
	}
	return out.String()
}

// sseMessage is one Server-Sent Events message; data may span lines.
func sseMessage(id, event, data string) string {
	var b strings.Builder
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + event + "\n")
	for _, line := range strings.Split(data, "\n") {
		b.WriteString("data: " + strings.TrimSuffix(line, "\r") + "\n")
	}
	b.WriteString("\n")
	return b.String()
}

// touch keeps a session with an open stream alive, as a request would;
// false when it has ended.
func (c *Console) touch(id string) bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if !ok || now.Sub(s.seen) > SessionIdle {
		return false
	}
	s.seen = now
	return true
}
