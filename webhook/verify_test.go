package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

func TestCheckURL(t *testing.T) {
	long := "https://example.com/" + strings.Repeat("a", webhook.MaxURLBytes-len("https://example.com/"))
	tests := []struct {
		name     string
		url      string
		custom   bool
		fragment string // "" means the URL is accepted
	}{
		{"https", "https://example.com/cb", false, ""},
		{"http with query", "http://example.com/cb?x=1&y=2", false, ""},
		{"http default port", "http://example.com:80/cb", false, ""},
		{"https default port", "https://example.com:443/cb", false, ""},
		{"ipv4", "http://192.0.2.1/cb", false, ""},
		{"ipv6", "http://[2001:db8::1]/cb", false, ""},
		{"custom port allowed", "http://127.0.0.1:8080/cb", true, ""},
		{"exactly 2048 bytes", long, false, ""},

		{"too long", long + "a", false, "at most 2048 bytes"},
		{"empty", "", false, "must begin with http:// or https://"},
		{"ftp", "ftp://example.com/cb", false, "must begin with http:// or https://"},
		{"upper-case scheme", "HTTPS://example.com/cb", false, "must begin with http:// or https://"},
		{"no slashes", "http:example.com/cb", false, "must begin with http:// or https://"},
		{"relative", "/cb", false, "must begin with http:// or https://"},
		{"no host", "https:///cb", false, "must have a host"},
		{"port without host", "http://:80/cb", false, "must have a host"},
		{"user info", "https://user:pw@example.com/cb", false, "user info"},
		{"user without password", "https://user@example.com/cb", false, "user info"},
		{"fragment", "https://example.com/cb#part", false, "fragment"},
		{"empty fragment", "https://example.com/cb#", false, "fragment"},
		{"NUL", "https://example.com/c\x00b", false, "control characters"},
		{"newline", "https://example.com/cb\n", false, "control characters"},
		{"tab", "https://example.com/\tcb", false, "control characters"},
		{"DEL", "https://example.com/\x7fcb", false, "control characters"},
		{"space", "https://example.com/c b", false, "spaces"},
		{"bad port", "https://example.com:http/cb", false, "not a valid absolute URL"},
		{"bad escape", "https://example.com/%zz", false, "not a valid absolute URL"},
		{"port 0", "http://example.com:0/cb", true, "port must be 1 to 65535"},
		{"port too big", "http://example.com:65536/cb", true, "port must be 1 to 65535"},
		{"huge port", "http://example.com:99999999999999999999/cb", true, "port must be 1 to 65535"},
		{"custom port", "http://example.com:8080/cb", false, "custom ports are not allowed (callback.allow_custom_ports is off): port 8080"},
		{"https port on http", "http://example.com:443/cb", false, "custom ports are not allowed"},
		{"http port on https", "https://example.com:80/cb", false, "custom ports are not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.CheckURL(tc.url, tc.custom)
			switch {
			case tc.fragment == "" && err != nil:
				t.Fatalf("CheckURL(%q) = %v, want nil", tc.url, err)
			case tc.fragment != "" && err == nil:
				t.Fatalf("CheckURL(%q) = nil, want an error mentioning %q", tc.url, tc.fragment)
			case tc.fragment != "" && !strings.Contains(err.Error(), tc.fragment):
				t.Fatalf("CheckURL(%q) = %q, want it to mention %q", tc.url, err, tc.fragment)
			}
		})
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://example.com/cb", "http://a:80/?x=1", "http://u@h/", "https://h/#f", "http://[::1]:8080/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := webhook.CheckURL(s, false); err != nil {
			return
		}
		// Anything accepted must be something Verify can request.
		if _, err := http.NewRequest(http.MethodGet, s, nil); err != nil {
			t.Fatalf("CheckURL accepted %q, which http.NewRequest refuses: %v", s, err)
		}
	})
}

// echoServer answers the echostr check through answer, which gets the
// echostr and writes the response; it records the query of each request.
type echoServer struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func newEchoServer(t *testing.T, answer func(w http.ResponseWriter, echostr string)) *echoServer {
	t.Helper()
	s := &echoServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.RawQuery)
		s.mu.Unlock()
		answer(w, r.URL.Query().Get("echostr"))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *echoServer) lastQuery() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queries) == 0 {
		return ""
	}
	return s.queries[len(s.queries)-1]
}

func TestVerify(t *testing.T) {
	echo := func(w http.ResponseWriter, e string) { io.WriteString(w, e) }
	tests := []struct {
		name     string
		answer   func(w http.ResponseWriter, echostr string)
		fragment string // "" means verification passes
	}{
		{"echo", echo, ""},
		{"wrong body", func(w http.ResponseWriter, _ string) { io.WriteString(w, "hello") }, "body did not equal echostr (got 5 bytes, want 32)"},
		{"empty body", func(w http.ResponseWriter, _ string) {}, "body did not equal echostr (got 0 bytes"},
		{"trailing newline", func(w http.ResponseWriter, e string) { io.WriteString(w, e+"\n") }, "body did not equal echostr"},
		{"leading space", func(w http.ResponseWriter, e string) { io.WriteString(w, " "+e) }, "whitespace"},
		{"quoted", func(w http.ResponseWriter, e string) { io.WriteString(w, `"`+e+`"`) }, "body did not equal echostr"},
		{"much longer", func(w http.ResponseWriter, e string) { io.WriteString(w, strings.Repeat("x", 1<<20)) }, "got more than 32 bytes"},
		{"prefix only", func(w http.ResponseWriter, e string) { io.WriteString(w, e[:31]) }, "got 31 bytes"},
		{"non-200 with the right body", func(w http.ResponseWriter, e string) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, e)
		}, "verification failed: HTTP 201"},
		{"404", func(w http.ResponseWriter, _ string) { http.NotFound(w, nil) }, "verification failed: HTTP 404"},
		{"500", func(w http.ResponseWriter, e string) {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, e)
		}, "verification failed: HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newEchoServer(t, tc.answer)
			err := webhook.Verify(context.Background(), &http.Client{Timeout: 5 * time.Second}, srv.URL+"/cb", testApp)
			switch {
			case tc.fragment == "" && err != nil:
				t.Fatalf("Verify = %v, want nil", err)
			case tc.fragment != "" && err == nil:
				t.Fatalf("Verify = nil, want an error mentioning %q", tc.fragment)
			case tc.fragment != "" && !strings.Contains(err.Error(), tc.fragment):
				t.Fatalf("Verify = %q, want it to mention %q", err, tc.fragment)
			}
		})
	}
}

func TestVerifyTrailingNewlineMessage(t *testing.T) {
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) { io.WriteString(w, e+"\n") })
	err := webhook.Verify(context.Background(), loopback, srv.URL, testApp)
	if err == nil || !strings.Contains(err.Error(), "more after the echostr value") {
		t.Fatalf("Verify = %v, want it to say the body has more after the echostr", err)
	}
}

func TestVerifyEchostrIsFreshAndRandom(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) {
		mu.Lock()
		seen[e] = true
		mu.Unlock()
		io.WriteString(w, e)
	})
	for range 3 {
		if err := webhook.Verify(context.Background(), loopback, srv.URL, testApp); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("3 verifications sent %d distinct echostr values: %v", len(seen), seen)
	}
	for e := range seen {
		if len(e) != 32 || strings.Trim(e, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != "" {
			t.Errorf("echostr %q is not 32 alphanumeric characters", e)
		}
	}
}

func TestVerifyKeepsTheQuery(t *testing.T) {
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) { io.WriteString(w, e) })
	if err := webhook.Verify(context.Background(), loopback, srv.URL+"/cb?b=2&a=1&flag&sp=a%20b", testApp); err != nil {
		t.Fatal(err)
	}
	q := srv.lastQuery()
	if !strings.HasPrefix(q, "b=2&a=1&flag&sp=a%20b&echostr=") || len(q) != len("b=2&a=1&flag&sp=a%20b&echostr=")+32 {
		t.Fatalf("query %q: want the URL's own query unchanged, then &echostr=<32 characters>", q)
	}
	if err := webhook.Verify(context.Background(), loopback, srv.URL+"/cb", testApp); err != nil {
		t.Fatal(err)
	}
	if q := srv.lastQuery(); !strings.HasPrefix(q, "echostr=") || len(q) != len("echostr=")+32 {
		t.Fatalf("query %q: want echostr=<32 characters> alone", q)
	}
}

func TestVerifyTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, e)
	})
	defer close(release) // before srv.Close, which waits for the handler
	start := time.Now()
	err := webhook.Verify(context.Background(), &http.Client{Timeout: 200 * time.Millisecond}, srv.URL, testApp)
	if err == nil || !strings.Contains(err.Error(), "verification failed: no response within 200ms") {
		t.Fatalf("Verify = %v, want no response within 200ms", err)
	}
	if waited := time.Since(start); waited > 4*time.Second {
		t.Fatalf("Verify waited %v for a 200ms timeout", waited)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = webhook.Verify(ctx, &http.Client{}, srv.URL, testApp)
	if err == nil || !strings.Contains(err.Error(), "verification failed: no response within") {
		t.Fatalf("Verify with a context deadline = %v, want no response within ...", err)
	}
}

func TestVerifySlowBody(t *testing.T) {
	// The status arrives at once; the body never does in time.
	release := make(chan struct{})
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) {
		w.Header().Set("Content-Length", "32")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, e)
	})
	defer close(release)
	err := webhook.Verify(context.Background(), &http.Client{Timeout: 200 * time.Millisecond}, srv.URL, testApp)
	if err == nil || !strings.Contains(err.Error(), "no response within 200ms") {
		t.Fatalf("Verify = %v, want no response within 200ms", err)
	}
}

func TestVerifyDoesNotFollowRedirects(t *testing.T) {
	target := newEchoServer(t, func(w http.ResponseWriter, e string) { io.WriteString(w, e) })
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect} {
		redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/?"+r.URL.RawQuery, code)
		}))
		// A client that would follow redirects: Verify must not.
		err := webhook.Verify(context.Background(), &http.Client{Timeout: 5 * time.Second}, redirect.URL, testApp)
		redirect.Close()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("verification failed: HTTP %d", code)) ||
			!strings.Contains(err.Error(), "redirects are not followed") {
			t.Errorf("redirect %d: Verify = %v, want HTTP %d, redirects not followed", code, err, code)
		}
	}
	if q := target.lastQuery(); q != "" {
		t.Errorf("the redirect target was requested (query %q)", q)
	}
}

func TestVerifyUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	err := webhook.Verify(context.Background(), loopback, addr, testApp)
	if err == nil || !strings.HasPrefix(err.Error(), "verification failed: ") {
		t.Fatalf("Verify = %v, want verification failed: ...", err)
	}
	if strings.Contains(err.Error(), "echostr=") || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error %q repeats the request URL or the address dialled", err)
	}
}

func TestSigningSecret(t *testing.T) {
	app := store.App{SigningSecret: "Vb8Nq2Lm5Xc7Rt1Zs4Hd9Kf3Jg6Pw0Ya"}
	if got, want := string(webhook.SigningKey(app)), app.SigningSecret; got != want {
		t.Errorf("SigningKey = %q, want %q", got, want)
	}
	if got, want := webhook.SigningSecret(app), "whsec_VmI4TnEyTG01WGM3UnQxWnM0SGQ5S2YzSmc2UHcwWWE="; got != want {
		t.Errorf("SigningSecret = %q, want %q", got, want)
	}
}

// testApp is the app whose headers verifications carry.
var testApp = store.App{Key: "app-key-1", MasterSecret: "master-secret-1", SigningSecret: "signing-secret-1"}

// loopback is a client without the address guard, for receivers on
// 127.0.0.1 (in the service, callback.allowed_networks exempts them).
var loopback = &http.Client{Timeout: 5 * time.Second}

// TestVerifySendsAppHeaders: the verification GET carries the Basic app
// key and master secret and the Standard Webhooks headers of the POSTs,
// so a receiver that checks them on every request, as a public SDK's
// callback server does, answers the echostr instead of 401.
func TestVerifySendsAppHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != testApp.Key || pass != testApp.MasterSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		if id == "" || ts == "" || r.Header.Get("webhook-signature") != webhook.Sign(webhook.SigningKey(testApp), id, ts, nil) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, r.URL.Query().Get("echostr"))
	}))
	defer srv.Close()
	if err := webhook.Verify(context.Background(), loopback, srv.URL, testApp); err != nil {
		t.Fatalf("Verify against a receiver that checks the headers: %v", err)
	}
}

// TestVerifyGuardedByDefault: with no client of the caller's, the address
// guard applies: loopback is refused with netguard.ErrNotAllowed, naming
// no address.
func TestVerifyGuardedByDefault(t *testing.T) {
	srv := newEchoServer(t, func(w http.ResponseWriter, e string) { io.WriteString(w, e) })
	err := webhook.Verify(context.Background(), nil, srv.URL, testApp)
	if !errors.Is(err, netguard.ErrNotAllowed) {
		t.Fatalf("Verify(%s) = %v, want netguard.ErrNotAllowed", srv.URL, err)
	}
	if strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error %q names the address", err)
	}
}
