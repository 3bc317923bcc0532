package events_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

const appKey = "app-key-1"

// testApp is the app whose webhooks the tests deliver.
var testApp = store.App{Key: appKey, Name: "test", MasterSecret: "master-secret-1", SigningSecret: "signing-secret-of-app-1"}

// receiver is a real HTTP server receiving webhooks. It answers the
// echostr GET, and POSTs with the status its fail function gives (200
// without one); a POST with a 2xx answer is kept.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	posts    []received // answered 2xx, in arrival order
	attempts int
	fail     func(attempt int) int // status of the attempt-th POST; 0: 200
	hold     chan struct{}         // when set, a POST waits for it to close
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.release()
		r.srv.Close()
	})
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet {
		io.WriteString(w, req.URL.Query().Get("echostr"))
		return
	}
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.attempts++
	n, fail, hold := r.attempts, r.fail, r.hold
	r.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return
		}
	}
	if fail != nil {
		if status := fail(n); status != 0 {
			w.WriteHeader(status)
			return
		}
	}
	r.mu.Lock()
	r.posts = append(r.posts, received{req.Header.Clone(), body})
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent) // any 2xx is success
}

// release lets held POSTs go.
func (r *receiver) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

func (r *receiver) url() string { return r.srv.URL + "/hook" }

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.posts)
}

func (r *receiver) attemptCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// batches decodes every accepted POST as a JSON array of events.
func (r *receiver) batches() [][]events.Wire {
	var out [][]events.Wire
	for _, p := range r.received() {
		var b []events.Wire
		if err := json.Unmarshal(p.body, &b); err != nil {
			r.t.Fatalf("POST body is not a JSON array of events: %v: %s", err, p.body)
		}
		out = append(out, b)
	}
	return out
}

// ids returns the ids of every event received, in arrival order.
func (r *receiver) ids() []int64 {
	var out []int64
	for _, b := range r.batches() {
		for _, e := range b {
			n, err := strconv.ParseInt(e.ID, 10, 64)
			if err != nil {
				r.t.Fatalf("event id %q is not a decimal string", e.ID)
			}
			out = append(out, n)
		}
	}
	return out
}

// waitIDs waits until the receiver has events, and checks they are want.
func (r *receiver) waitIDs(want []int64) {
	r.t.Helper()
	waitFor(r.t, fmt.Sprintf("%d events at %s", len(want), r.url()), func() bool { return len(r.ids()) >= len(want) })
	if got := r.ids(); !slices.Equal(got, want) {
		r.t.Fatalf("received ids %v, want %v", got, want)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testConfig delivers fast: short linger, backoff and reload, and
// receivers on loopback allowed.
func testConfig() events.WebhookConfig {
	return events.WebhookConfig{
		BatchSize:       100,
		Linger:          20 * time.Millisecond,
		RequestTimeout:  5 * time.Second,
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		MinBackoff:      10 * time.Millisecond,
		MaxBackoff:      40 * time.Millisecond,
		Reload:          50 * time.Millisecond,
	}
}

type fixture struct {
	t     *testing.T
	st    *fakeStore
	hooks *events.Webhooks
	reg   *prometheus.Registry
}

// newFixture starts webhook delivery with cfg on a store holding testApp.
func newFixture(t *testing.T, cfg events.WebhookConfig) *fixture {
	st := newFakeStore()
	st.apps[appKey] = testApp
	f := &fixture{t: t, st: st}
	f.start(cfg)
	return f
}

// start starts a new Webhooks on the fixture's store, as a restart would.
func (f *fixture) start(cfg events.WebhookConfig) {
	f.reg = prometheus.NewRegistry()
	hooks, err := events.NewWebhooks(cfg, f.st, f.st, slog.New(slog.NewTextHandler(io.Discard, nil)), f.reg)
	if err != nil {
		f.t.Fatal(err)
	}
	hooks.Start()
	f.t.Cleanup(hooks.Stop)
	f.hooks = hooks
}

// add adds a webhook for url with types and format.
func (f *fixture) add(url string, format string, types ...string) {
	f.t.Helper()
	h, err := events.CheckWebhook(store.EventWebhook{URL: url, Types: types, Format: format})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.hooks.Add(context.Background(), appKey, h); err != nil {
		f.t.Fatalf("add webhook: %v", err)
	}
}

// emit appends events of typ, one per device name, and returns their ids.
func (f *fixture) emit(typ string, devices ...string) []int64 {
	f.t.Helper()
	var evs []store.Event
	for _, d := range devices {
		var data any
		if typ == events.TypeEvent {
			data = events.Report{Name: "door", Content: "opened by " + d, Type: 1, Time: 1700000000123}
		}
		evs = append(evs, events.New(typ, appKey, d, time.Now(), data))
	}
	evs, err := f.st.AppendEvents(context.Background(), evs)
	if err != nil {
		f.t.Fatal(err)
	}
	ids := make([]int64, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

func devices(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dev-%03d", i)
	}
	return out
}

func TestWebhookBatchesAtMostBatchSize(t *testing.T) {
	cfg := testConfig()
	cfg.BatchSize = 3
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	ids := f.emit(events.TypeUp, devices(8)...)
	rcv.waitIDs(ids)
	var sizes []int
	for _, b := range rcv.batches() {
		sizes = append(sizes, len(b))
	}
	// The log held all 8 at once: full batches, then the rest.
	if !slices.Equal(sizes, []int{3, 3, 2}) {
		t.Fatalf("batch sizes %v, want [3 3 2]", sizes)
	}
}

func TestWebhookLingersForMoreEvents(t *testing.T) {
	cfg := testConfig()
	cfg.Linger = 2 * time.Second // far longer than the gap between the two events
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	first := f.emit(events.TypeUp, "a")
	time.Sleep(20 * time.Millisecond)
	second := f.emit(events.TypeUp, "b")
	rcv.waitIDs(append(first, second...))
	// A batch that is not full waits for the linger, then goes.
	if n := len(rcv.received()); n != 1 {
		t.Fatalf("%d POSTs, want both events in one", n)
	}
}

// While a POST is in flight the loop reads the next batch, so it goes as
// soon as the receiver answers; still one POST at a time, in order.
func TestWebhookReadsNextBatchWhilePOSTInFlight(t *testing.T) {
	cfg := testConfig()
	cfg.BatchSize = 3
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	rcv.mu.Lock()
	rcv.hold = make(chan struct{})
	rcv.mu.Unlock()
	ids := f.emit(events.TypeUp, devices(8)...)
	waitFor(t, "a read after the first batch while its POST is held", func() bool { return f.st.readAfter(ids[2]) })
	time.Sleep(50 * time.Millisecond)
	if n := rcv.attemptCount(); n != 1 {
		t.Fatalf("%d POSTs under way, want 1: a batch goes only once the one before it is answered", n)
	}
	rcv.release()
	rcv.waitIDs(ids)
	var sizes []int
	for _, b := range rcv.batches() {
		sizes = append(sizes, len(b))
	}
	if !slices.Equal(sizes, []int{3, 3, 2}) {
		t.Fatalf("batch sizes %v, want [3 3 2]", sizes)
	}
}

// verifyStandardWebhook checks a request's signature as the Standard
// Webhooks spec tells receivers to: the secret is "whsec_" and the base64
// key; the signed content is "id.timestamp.body"; the header holds
// space-separated "v1,<base64 HMAC-SHA256>" values, one of which must
// match; the timestamp must be within 5 minutes.
func verifyStandardWebhook(secret string, h http.Header, body []byte) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %v", ts, err)
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp %s is too far from now", ts)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("secret: %v", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Fields(sigs) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("no signature in %q matches", sigs)
}

func TestWebhookSignedWithBasicAndStandardWebhooks(t *testing.T) {
	f := newFixture(t, testConfig())
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	ids := f.emit(events.TypeOnline, "a", "b")
	rcv.waitIDs(ids)
	p := rcv.received()[0]
	// The secret receivers configure, as the admin API shows it.
	secret := webhook.SigningSecret(testApp)
	if err := verifyStandardWebhook(secret, p.header, p.body); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	if id := p.header.Get("webhook-id"); id != strconv.FormatInt(ids[0], 10) {
		t.Fatalf("webhook-id %q, want the first event's id %d", id, ids[0])
	}
	if err := verifyStandardWebhook(secret, p.header, append(p.body, ' ')); err == nil {
		t.Fatal("a changed body verifies")
	}
	req := http.Request{Header: p.header}
	user, pass, ok := req.BasicAuth()
	if !ok || user != testApp.Key || pass != testApp.MasterSecret {
		t.Fatalf("Basic auth %q:%q (ok %v), want the app key and master secret", user, pass, ok)
	}
	if ct := p.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

func TestWebhookJIOTOnePerPOST(t *testing.T) {
	f := newFixture(t, testConfig())
	rcv := newReceiver(t)
	f.add(rcv.url(), events.FormatJIOT)
	f.emit(events.TypeUp, "a")
	ids := f.emit(events.TypeEvent, "a", "b")
	f.emit(events.TypeOnline, "c")
	ids = append(ids, f.emit(events.TypeEvent, "c")...)
	waitFor(t, "3 jiot POSTs", func() bool { return len(rcv.received()) >= 3 })
	// Give a wrongly sent up or online event time to show.
	time.Sleep(100 * time.Millisecond)
	posts := rcv.received()
	if len(posts) != 3 {
		t.Fatalf("%d POSTs, want one per device.event (3)", len(posts))
	}
	secret := webhook.SigningSecret(testApp)
	for i, p := range posts {
		if err := verifyStandardWebhook(secret, p.header, p.body); err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(p.body, &body); err != nil {
			t.Fatalf("POST %d is not a JSON object: %s", i, p.body)
		}
		var keys []string
		for k := range body {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"device_name", "event", "product_key", "report_seq"}) {
			t.Fatalf("POST %d has keys %v: %s", i, keys, p.body)
		}
		var got struct {
			ProductKey string `json:"product_key"`
			ReportSeq  int64  `json:"report_seq"`
			DeviceName string `json:"device_name"`
			Event      map[string]any
		}
		json.Unmarshal(p.body, &got)
		dev := []string{"a", "b", "c"}[i]
		want := map[string]any{"name": "door", "content": "opened by " + dev, "time": float64(1700000000123), "type": float64(1)}
		if got.ProductKey != appKey || got.ReportSeq != ids[i] || got.DeviceName != dev || fmt.Sprint(got.Event) != fmt.Sprint(want) {
			t.Fatalf("POST %d: %s; want product_key %s, report_seq %d, device_name %s, event %v", i, p.body, appKey, ids[i], dev, want)
		}
		if id := p.header.Get("webhook-id"); id != strconv.FormatInt(ids[i], 10) {
			t.Fatalf("POST %d: webhook-id %q, want %d", i, id, ids[i])
		}
	}
}

func TestWebhookTypesFilter(t *testing.T) {
	f := newFixture(t, testConfig())
	rcv := newReceiver(t)
	f.add(rcv.url(), "", events.TypeOnline, events.TypeOffline)
	var want []int64
	for range 3 {
		f.emit(events.TypeUp, "a", "b")
		want = append(want, f.emit(events.TypeOnline, "a")...)
		f.emit(events.TypeCreated, "c")
		want = append(want, f.emit(events.TypeOffline, "a")...)
	}
	rcv.waitIDs(want)
	for _, b := range rcv.batches() {
		for _, e := range b {
			if e.Type != events.TypeOnline && e.Type != events.TypeOffline {
				t.Fatalf("got a %s event", e.Type)
			}
		}
	}
}

// A webhook that answers errors for a while gets every event, in order,
// once it is back.
func TestWebhookDownThenBackGetsAllInOrder(t *testing.T) {
	cfg := testConfig()
	cfg.BatchSize = 4
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	var down sync.Mutex
	isDown := true
	rcv.fail = func(int) int {
		down.Lock()
		defer down.Unlock()
		if isDown {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	f.add(rcv.url(), "")
	var want []int64
	for i := range 5 {
		want = append(want, f.emit(events.TypeUp, devices(3)...)...)
		if i == 2 {
			waitFor(t, "failed attempts", func() bool { return rcv.attemptCount() >= 3 })
		}
	}
	down.Lock()
	isDown = false
	down.Unlock()
	rcv.waitIDs(want)
	if n := metricValue(t, f.reg, "devmsg_event_webhook_requests_total", "outcome", "failed"); n < 3 {
		t.Fatalf("failed attempts metric %v, want at least 3", n)
	}
	// The sender counts a batch once it has read the answer, a moment
	// after the receiver has it: waiting only for the receiver made this
	// test fail now and then (12 counted of 15).
	delivered := func() float64 { return metricValue(t, f.reg, "devmsg_event_webhook_events_delivered_total") }
	waitFor(t, "the delivered metric", func() bool { return delivered() >= float64(len(want)) })
	if n := delivered(); n != float64(len(want)) {
		t.Fatalf("delivered metric %v, want %d", n, len(want))
	}
}

// One webhook that does not answer holds back no other.
func TestWebhookDeadDoesNotDelayAnother(t *testing.T) {
	cfg := testConfig()
	cfg.RequestTimeout = time.Hour // the hung POST stays in flight throughout
	f := newFixture(t, cfg)
	dead, live := newReceiver(t), newReceiver(t)
	f.add(dead.url(), "")
	f.add(live.url(), "")
	dead.mu.Lock()
	dead.hold = make(chan struct{}) // hangs until the test ends
	dead.mu.Unlock()
	var want []int64
	for range 5 {
		want = append(want, f.emit(events.TypeUp, devices(4)...)...)
		time.Sleep(5 * time.Millisecond)
	}
	live.waitIDs(want)
	waitFor(t, "a POST to the hung webhook", func() bool { return dead.attemptCount() > 0 })
	if n := len(dead.received()); n != 0 || dead.attemptCount() != 1 {
		t.Fatalf("the hung webhook: %d POSTs answered, %d attempts; want none answered, one hanging", n, dead.attemptCount())
	}
}

// After a restart each webhook resumes at its stored cursor: nothing
// delivered before is sent again and nothing made meanwhile is lost.
func TestWebhookRestartResumesFromCursor(t *testing.T) {
	cfg := testConfig()
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	before := f.emit(events.TypeUp, devices(5)...)
	rcv.waitIDs(before)
	// The receiver has the POST before the loop has its answer: stopping
	// in between cancels the POST, and resending it is right. Stop once
	// the loop counted it delivered.
	waitFor(t, "the delivery counted", func() bool {
		return metricValue(t, f.reg, "devmsg_event_webhook_events_delivered_total") == float64(len(before))
	})
	f.hooks.Stop()
	during := f.emit(events.TypeUp, devices(7)...)
	f.start(cfg)
	after := f.emit(events.TypeUp, devices(2)...)
	rcv.waitIDs(slices.Concat(before, during, after))
}

// A new webhook starts at the log's end: events already kept are for
// pull, not pushed.
func TestWebhookStartsAtLogEnd(t *testing.T) {
	f := newFixture(t, testConfig())
	f.emit(events.TypeUp, devices(30)...)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	ids := f.emit(events.TypeUp, "new")
	rcv.waitIDs(ids)
}

// A webhook whose events leave the log while it is down skips to the
// oldest kept event, counted and logged.
func TestWebhookOvertakenByTrimSkipsAhead(t *testing.T) {
	f := newFixture(t, testConfig())
	rcv := newReceiver(t)
	var mu sync.Mutex
	up := false
	rcv.fail = func(int) int {
		mu.Lock()
		defer mu.Unlock()
		if up {
			return 0
		}
		return http.StatusBadGateway
	}
	f.add(rcv.url(), "")
	lost := f.emit(events.TypeUp, devices(4)...)
	waitFor(t, "a failed attempt", func() bool { return rcv.attemptCount() >= 1 })
	kept := f.emit(events.TypeUp, devices(3)...)
	f.st.trim(appKey, lost[len(lost)-1])
	mu.Lock()
	up = true
	mu.Unlock()
	rcv.waitIDs(kept)
	if n := metricValue(t, f.reg, "devmsg_event_webhook_overtaken_total"); n != 1 {
		t.Fatalf("overtaken metric %v, want 1", n)
	}
}

// Deleting a webhook stops its delivery; the others go on.
func TestWebhookDeleteStopsDelivery(t *testing.T) {
	f := newFixture(t, testConfig())
	gone, stays := newReceiver(t), newReceiver(t)
	f.add(gone.url(), "")
	f.add(stays.url(), "")
	first := f.emit(events.TypeUp, "a")
	gone.waitIDs(first)
	if _, err := f.hooks.Delete(context.Background(), appKey, gone.url()); err != nil {
		t.Fatal(err)
	}
	second := f.emit(events.TypeUp, "b")
	stays.waitIDs(append(first, second...))
	time.Sleep(100 * time.Millisecond) // a wrong delivery would show by now
	if got := gone.ids(); !slices.Equal(got, first) {
		t.Fatalf("the deleted webhook got %v, want only %v", got, first)
	}
	var iv *errdefs.InvalidError
	if _, err := f.hooks.Delete(context.Background(), appKey, gone.url()); !errors.As(err, &iv) || iv.Field != "url" {
		t.Fatalf("deleting it again: %v, want an invalid url", err)
	}
}

func TestWebhookLimitAndDuplicates(t *testing.T) {
	f := newFixture(t, testConfig())
	ctx := context.Background()
	for i := range store.MaxEventWebhooks {
		if _, err := f.hooks.Add(ctx, appKey, store.EventWebhook{URL: fmt.Sprintf("https://example.com/h%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var cf *errdefs.ConflictError
	if _, err := f.hooks.Add(ctx, appKey, store.EventWebhook{URL: "https://example.com/h0"}); !errors.As(err, &cf) {
		t.Fatalf("adding a URL twice: %v, want a conflict", err)
	}
	var iv *errdefs.InvalidError
	_, err := f.hooks.Add(ctx, appKey, store.EventWebhook{URL: "https://example.com/h6"})
	if !errors.As(err, &iv) || !strings.Contains(err.Error(), "at most 5") {
		t.Fatalf("a 6th webhook: %v, want at most 5", err)
	}
}

func TestCheckWebhook(t *testing.T) {
	for _, tc := range []struct {
		name, format string
		types        []string
		want         []string // stored types
		field        string   // the invalid field, "" for none
	}{
		{name: "every type", want: nil},
		{name: "some types", types: []string{events.TypeUp, events.TypeOnline}, want: []string{events.TypeUp, events.TypeOnline}},
		{name: "jiot", format: "jiot", want: []string{events.TypeEvent}},
		{name: "jiot with device.event", format: "jiot", types: []string{events.TypeEvent}, want: []string{events.TypeEvent}},
		{name: "jiot with another type", format: "jiot", types: []string{events.TypeUp}, field: "types"},
		{name: "empty types", types: []string{}, field: "types"},
		{name: "unknown type", types: []string{events.TypeUp, "device.up2"}, field: "types[1]"},
		{name: "type twice", types: []string{events.TypeUp, events.TypeUp}, field: "types[1]"},
		{name: "unknown format", format: "xml", field: "format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := events.CheckWebhook(store.EventWebhook{URL: "https://example.com/", Types: tc.types, Format: tc.format})
			var iv *errdefs.InvalidError
			switch {
			case tc.field != "" && (!errors.As(err, &iv) || iv.Field != tc.field):
				t.Fatalf("got %v, want an invalid %s", err, tc.field)
			case tc.field == "" && err != nil:
				t.Fatal(err)
			case tc.field == "" && !slices.Equal(h.Types, tc.want):
				t.Fatalf("types %v, want %v", h.Types, tc.want)
			}
		})
	}
}

// metricValue returns the value of the counter named name whose app
// label is appKey and whose other labels are the pairs given; 0 if none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["app"] != appKey {
				continue
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestWebhookStartsAtNewestOfEmptiedLog: a webhook starts at the newest
// id the log handed out, found in one read, even when retention emptied
// the log (a read to its end would find no event and start at 0).
func TestWebhookStartsAtNewestOfEmptiedLog(t *testing.T) {
	f := newFixture(t, testConfig())
	ids := f.emit(events.TypeUp, devices(30)...)
	f.st.trim(appKey, ids[len(ids)-1])
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	app, err := f.st.Get(context.Background(), appKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := app.EventWebhooks[len(app.EventWebhooks)-1].Start; got != ids[len(ids)-1] {
		t.Errorf("the webhook starts after %d, want the newest id %d", got, ids[len(ids)-1])
	}
	rcv.waitIDs(f.emit(events.TypeUp, "new"))
}

// TestWebhookBigBatchGoesWithoutLinger: a batch holding 2 MiB of event
// data goes at once instead of lingering for more, so a POST stays a few
// MiB however large batch_size is.
func TestWebhookBigBatchGoesWithoutLinger(t *testing.T) {
	cfg := testConfig()
	cfg.Linger = time.Hour
	f := newFixture(t, cfg)
	rcv := newReceiver(t)
	f.add(rcv.url(), "")
	big := []byte(strings.Repeat("x", 1<<20))
	evs := []store.Event{
		events.New(events.TypeUp, appKey, "d", time.Now(), events.UpData("up", 1, big)),
		events.New(events.TypeUp, appKey, "d", time.Now(), events.UpData("up", 1, big)),
	}
	evs, err := f.st.AppendEvents(context.Background(), evs)
	if err != nil {
		t.Fatal(err)
	}
	rcv.waitIDs([]int64{evs[0].ID, evs[1].ID})
}
