package restapi_test

import (
	"crypto/sha256"
	"github.com/devmsg/devmsg/restapi/restapitest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store/pebble"
)

// lenientAuth lets a test fail authentication more often than the
// throttle allows.
func lenientAuth(cfg *restapi.Config) {
	cfg.AuthSourceFailures, cfg.AuthIdentityFailures = 1000, 1000
}

// authAPI is the API's handler, called directly so each request can come
// from an address of the test's choosing.
type authAPI struct {
	h   http.Handler
	key string // an app's key
	sec string // and master secret
}

func newAuthAPI(t *testing.T, window time.Duration) *authAPI {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	app := apps.New("throttled")
	if err := st.CreateApp(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	cfg, err := restapitest.Config(st, restapi.Config{
		AdminUsername: "admin", AdminPasswordSHA256: sha256.Sum256([]byte(adminPassword)), AuthWindow: window,
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := restapi.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return &authAPI{h: api.Handler(), key: app.Key, sec: app.MasterSecret}
}

func (a *authAPI) get(from, path, user, pass string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = from
	req.SetBasicAuth(user, pass)
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status, code int, what string) {
	t.Helper()
	resp := response{rec.Code, rec.Header(), rec.Body.Bytes()}
	if status == 200 {
		resp.wantOK(t)
		return
	}
	resp.wantError(t, status, code)
	if status == 429 {
		if s, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("%s: 429 with Retry-After %q", what, rec.Header().Get("Retry-After"))
		}
	}
}

// TestAuthThrottle: failed authentication on the REST and the admin API
// is throttled per source address (429/2002 with Retry-After after
// AuthSourceFailures), an unknown app key counts like a wrong secret, the
// right credentials from another address still work, and the lock ends
// after the window.
func TestAuthThrottle(t *testing.T) {
	const window = 1500 * time.Millisecond
	const rest, admin = "/device/v1/baseinfo?device_name=nope", "/admin/v1/apps"
	attacker, other := "198.51.100.7:40000", "203.0.113.9:40000"

	for _, c := range []struct {
		name, path, user, pass, rightUser, rightPass string
	}{
		{"wrong master secret", rest, "KEY", "guess", "KEY", "SECRET"},
		{"unknown app key", rest, "no-such-app", "guess", "KEY", "SECRET"},
		{"wrong admin password", admin, "admin", "guess", "admin", adminPassword},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := newAuthAPI(t, window) // fresh counts, no credentials used yet
			for _, p := range []*string{&c.user, &c.rightUser} {
				if *p == "KEY" {
					*p = a.key
				}
			}
			if c.rightPass == "SECRET" {
				c.rightPass = a.sec
			}
			want := func(rec *httptest.ResponseRecorder, status, code int, what string) {
				t.Helper()
				if c.path == rest && status == 200 {
					status, code = 400, 1003 // authenticated: the device is unknown
				}
				wantStatus(t, rec, status, code, what)
			}
			for i := 1; i < restapi.AuthSourceFailures; i++ {
				want(a.get(attacker, c.path, c.user, c.pass+strconv.Itoa(i)), 401, 1004, "failure "+strconv.Itoa(i))
			}
			want(a.get(attacker, c.path, c.user, "last"), 401, 1004, "the last failure allowed")
			want(a.get(attacker, c.path, c.user, "more"), 429, 2002, "a failure over the limit")
			// Locked: the right credentials, never used before, from the
			// locked address wait too (else the lock would tell a guess
			// that is right from one that is wrong).
			want(a.get(attacker, c.path, c.rightUser, c.rightPass), 429, 2002, "right credentials from the locked address")
			// Another address is not locked.
			want(a.get(other, c.path, c.rightUser, c.rightPass), 200, 0, "right credentials from another address")
			// Trust follows the address, not the credentials: right
			// credentials that worked elsewhere still wait at the locked
			// address, else the lock would answer a right guess there.
			want(a.get(attacker, c.path, c.rightUser, c.rightPass), 429, 2002, "credentials that worked elsewhere, from the locked address")
			// The address they worked from goes on working.
			want(a.get(other, c.path, c.rightUser, c.rightPass), 200, 0, "right credentials again from their address")
			want(a.get(attacker, c.path, c.user, "more"), 429, 2002, "still locked for guesses")
			// The lock ends after the window.
			time.Sleep(window + 100*time.Millisecond)
			want(a.get(attacker, c.path, c.user, "again"), 401, 1004, "after the lock")
		})
	}
}

// TestAuthThrottleIdentity: failures for one app key spread over many
// addresses lock that key (at AuthIdentityFailures, looser than the
// per-address limit) for addresses that never authenticated as it, while
// the app's own backend keeps working from the address it authenticated
// from. IPv6 addresses count by /64.
func TestAuthThrottleIdentity(t *testing.T) {
	a := newAuthAPI(t, time.Hour)
	const path = "/device/v1/baseinfo?device_name=nope"
	// The backend authenticates once, before the attack.
	wantStatus(t, a.get("192.0.2.10:1", path, a.key, a.sec), 400, 1003, "backend before the attack")
	if restapi.AuthIdentityFailures <= restapi.AuthSourceFailures {
		t.Fatalf("AuthIdentityFailures %d must be looser than AuthSourceFailures %d", restapi.AuthIdentityFailures, restapi.AuthSourceFailures)
	}
	for i := range restapi.AuthIdentityFailures {
		from := "198.51.100." + strconv.Itoa(1+i/(restapi.AuthSourceFailures-1)) + ":1"
		wantStatus(t, a.get(from, path, a.key, "guess"), 401, 1004, "spread failure")
	}
	wantStatus(t, a.get("198.51.100.200:1", path, a.key, "guess"), 429, 2002, "a new address guessing the locked key")
	wantStatus(t, a.get("198.51.100.201:1", path, "other-key", "guess"), 401, 1004, "another key is not locked")
	wantStatus(t, a.get("192.0.2.10:2", path, a.key, a.sec), 400, 1003, "the backend, from the address it authenticated from")
	wantStatus(t, a.get("198.51.100.202:1", path, a.key, a.sec), 429, 2002, "the right secret from an untrusted address (no oracle)")
	// Guesses from the trusted address itself are still limited.
	for i := range restapi.AuthSourceFailures {
		wantStatus(t, a.get("192.0.2.10:3", path, a.key, "guess"+strconv.Itoa(i)), 401, 1004, "guess from the trusted address")
	}
	wantStatus(t, a.get("192.0.2.10:4", path, a.key, "guess"), 429, 2002, "the trusted address over its own limit")

	// One IPv6 host's /64 is one source.
	for i := range restapi.AuthSourceFailures {
		wantStatus(t, a.get("[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:1", path, "v6-key", "guess"), 401, 1004, "v6 failure")
	}
	wantStatus(t, a.get("[2001:db8:1:2:ffff::9]:1", path, "v6-other", "guess"), 429, 2002, "same /64")
	wantStatus(t, a.get("[2001:db8:1:3::1]:1", path, "v6-other", "guess"), 401, 1004, "another /64")
}

// TestNewWantsEveryService: the API builds no domain service of its own;
// a config without one is refused, naming it.
func TestNewWantsEveryService(t *testing.T) {
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = restapi.New(restapi.Config{}, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "Config.Messages is nil") {
		t.Fatalf("New without services: %v, want Config.Messages is nil", err)
	}
}
