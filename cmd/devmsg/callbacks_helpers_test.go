package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiver is a developer's callback endpoint: it answers the echostr
// check and records every POSTed batch, answering with status (200 unless
// set) after delay.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	status   atomic.Int32
	delay    atomic.Int64 // nanoseconds
	attempts atomic.Int64 // POSTs started

	mu      sync.Mutex
	batches []batch
}

type batch struct {
	at      time.Time
	header  http.Header
	body    []byte
	records []cbRecord
}

// cbRecord is a delivered record as a receiver decodes it.
type cbRecord struct {
	ID         string          `json:"id"`
	Type       int             `json:"type"`
	ChannelKey string          `json:"channelkey"`
	MsgID      string          `json:"msgid"`
	UserID     string          `json:"userid"`
	SenderID   string          `json:"sender_id"`
	Sender     *int            `json:"sender"`
	SentTime   int64           `json:"sent_time"`
	Error      *cbError        `json:"error"`
	Params     json.RawMessage `json:"params"`
}

type cbError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func newReceiver(t *testing.T) *receiver { return newReceiverAt(t, "") }

// newReceiverAt is newReceiver listening on addr (host:port), or on a
// loopback port when addr is "".
func newReceiverAt(t *testing.T, addr string) *receiver {
	r := &receiver{t: t}
	r.status.Store(200)
	r.srv = serveTestHTTP(t, addr, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet {
			io.WriteString(w, req.URL.Query().Get("echostr"))
			return
		}
		r.attempts.Add(1)
		body, err := io.ReadAll(req.Body)
		if err != nil {
			// The sender went away mid-body (the kill -9 tests kill it
			// while it posts): a cut-off attempt, nothing delivered.
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(time.Duration(r.delay.Load()))
		b := batch{at: time.Now(), header: req.Header.Clone(), body: body}
		if err := json.Unmarshal(body, &b.records); err != nil {
			t.Errorf("callback body is not a JSON array of records: %v: %s", err, body)
		}
		r.mu.Lock()
		r.batches = append(r.batches, b)
		r.mu.Unlock()
		w.WriteHeader(int(r.status.Load()))
	}))
	return r
}

// serveTestHTTP starts an HTTP server for h on addr, or on a loopback
// port when addr is "", closed when the test ends.
func serveTestHTTP(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func (r *receiver) url(path string) string { return r.srv.URL + path }

func (r *receiver) got() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]batch(nil), r.batches...)
}

// records returns every record received, in arrival order.
func (r *receiver) records() []cbRecord {
	var out []cbRecord
	for _, b := range r.got() {
		out = append(out, b.records...)
	}
	return out
}

// ofMessage returns the types of msgid's records received, in order.
func (r *receiver) ofMessage(msgid int64) []int {
	var out []int
	for _, rec := range r.records() {
		if rec.MsgID == fmt.Sprint(msgid) {
			out = append(out, rec.Type)
		}
	}
	return out
}

// callbackFleet is a fleet whose callbacks are quick enough to test: a
// 300 ms flush, a 300 ms retry interval, 2 retries, a 1 s request timeout
// and loopback receivers on any port.
func callbackFleet(t *testing.T, args ...string) *fleet {
	return newFleet(t, append([]string{"--callback.allow_custom_ports=true", "--callback.allowed_networks=127.0.0.0/8", "--callback.flush_interval", "300ms",
		"--callback.retry_interval", "300ms", "--callback.max_retries", "2", "--callback.request_timeout", "1s"}, args...)...)
}

// addURL adds a callback URL to the demo app through the admin API.
func (f *fleet) addURL(u string) {
	f.t.Helper()
	f.restOK("POST", "/admin/v1/apps/"+demoKey+"/callback/urls", fmt.Sprintf(`{"url":%q}`, u), nil)
}

// setCallback sets the demo app's switch and record types.
func (f *fleet) setCallback(body string) {
	f.t.Helper()
	f.restOK("PUT", "/admin/v1/apps/"+demoKey+"/callback", body, nil)
}

// signingSecret returns the demo app's signing secret (whsec_...).
func (f *fleet) signingSecret() string {
	f.t.Helper()
	var v struct {
		SigningSecret string `json:"signing_secret"`
	}
	f.restOK("GET", "/admin/v1/apps/"+demoKey+"/callback", "", &v)
	return v.SigningSecret
}

// verifySignature checks a batch's Standard Webhooks headers the way a
// receiver would, from the documented algorithm alone.
func verifySignature(t *testing.T, secret string, b batch) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("signing secret %q: %v", secret, err)
	}
	id, ts := b.header.Get("webhook-id"), b.header.Get("webhook-timestamp")
	if id == "" || ts == "" {
		t.Fatalf("missing webhook-id or webhook-timestamp: %v", b.header)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, b.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(b.header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return
		}
	}
	t.Fatalf("webhook-signature %q does not verify (want %q)", b.header.Get("webhook-signature"), want)
}
