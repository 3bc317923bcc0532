package restapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/restapi/restapitest"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/openapitest"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

const adminPassword = "test-admin-password"

// env is a real devmsg API over HTTPS on a loopback port, backed by Pebble
// in a temp dir.
type env struct {
	t      *testing.T
	dir    string
	st     store.Store
	srv    *httptest.Server
	client *http.Client
	app    store.App // an app created for the test
	oapi   *openapitest.Validator
	opts   []envOption
	// deviceEvents, when set, hears what the device service tells the
	// broker (disabled, deleted).
	deviceEvents devices.Events
	// handler is the API's, for tests that serve it themselves.
	handler http.Handler
	// api is the API itself, for tests that go through its routes.
	api *restapi.API
	// fanout, when set, paces the broadcasts' fan-out instead of the
	// default.
	fanout *message.FanoutConfig
	// broadcasts runs the fan-out while the server runs.
	broadcasts *message.Broadcaster
	// jobs is the API's job service; tests that need jobs to move start
	// its runner (stop stops it).
	jobs *job.Service
}

// envOption changes the API's configuration from the test default.
type envOption func(*restapi.Config)

var (
	oapiOnce sync.Once
	oapi     *openapitest.Validator
)

func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	return startEnv(&env{t: t, dir: t.TempDir(), opts: opts})
}

// startEnv starts e and creates its test app.
func startEnv(e *env) *env {
	e.t.Helper()
	e.start()
	e.app = e.createApp("test-app")
	return e
}

func (e *env) start() {
	t := e.t
	t.Helper()
	st, err := pebble.Open(e.dir)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	cfg := restapi.Config{
		DefaultRateLimit:    1000,
		AdminUsername:       "admin",
		AdminPasswordSHA256: sha256.Sum256([]byte(adminPassword)),
	}
	for _, o := range e.opts {
		o(&cfg)
	}
	if e.deviceEvents != nil {
		cfg.DeviceService = devices.NewService(st, e.deviceEvents)
	}
	cfg, err = restapitest.Config(st, cfg)
	if err != nil {
		t.Fatalf("services: %v", err)
	}
	if e.fanout != nil {
		cfg.Broadcasts = message.NewBroadcaster(cfg.Messages, st, *e.fanout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	api, err := restapi.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("new api: %v", err)
	}
	e.st, e.handler, e.api = st, api.Handler(), api
	if err := cfg.Broadcasts.Start(); err != nil {
		t.Fatalf("start fan-out: %v", err)
	}
	e.broadcasts = cfg.Broadcasts
	e.jobs = cfg.Jobs
	oapiOnce.Do(func() { oapi = openapitest.Load(t, "../docs/openapi.yaml") })
	e.oapi = oapi
	e.srv = httptest.NewUnstartedServer(api.Handler())
	// Handshakes cut short when a test closes its server are expected.
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.srv.StartTLS()
	e.client = e.srv.Client()
	t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.srv == nil {
		return
	}
	e.srv.Close()
	e.broadcasts.Stop()
	e.jobs.Runner().Stop()
	if err := e.st.Close(); err != nil {
		e.t.Errorf("close store: %v", err)
	}
	e.srv = nil
}

// restart stops the server and opens the same data dir again.
func (e *env) restart() {
	e.stop()
	e.start()
}

type creds struct{ user, pass string }

func (e *env) appCreds() creds  { return creds{e.app.Key, e.app.MasterSecret} }
func adminCreds() creds         { return creds{"admin", adminPassword} }
func credsOf(a store.App) creds { return creds{a.Key, a.MasterSecret} }

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request and checks the exchange against docs/openapi.yaml.
func (e *env) do(method, path string, body any, c *creds) response {
	e.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			e.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(raw))
	if err != nil {
		e.t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c != nil {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if !strings.HasPrefix(path, "/debug/") {
		e.oapi.Check(e.t, req, raw, resp, out)
	}
	return response{resp.StatusCode, resp.Header, out}
}

// call is do with the test app's credentials.
func (e *env) call(method, path string, body any) response {
	e.t.Helper()
	c := e.appCreds()
	return e.do(method, path, body, &c)
}

func (e *env) createApp(name string) store.App {
	e.t.Helper()
	c := adminCreds()
	r := e.do("POST", "/admin/v1/apps", map[string]string{"name": name}, &c)
	if r.status != 200 {
		e.t.Fatalf("create app: %d %s", r.status, r.body)
	}
	var out struct{ Name, Key, Master_Secret string }
	r.decode(e.t, &out)
	return store.App{Name: out.Name, Key: out.Key, MasterSecret: out.Master_Secret}
}

// createDevices creates devices in the test app and returns their secrets.
func (e *env) createDevices(names ...string) []string {
	e.t.Helper()
	devs := make([]map[string]string, len(names))
	for i, n := range names {
		devs[i] = map[string]string{"name": n}
	}
	r := e.call("POST", "/device/v1/devices", map[string]any{"device": devs})
	var out struct {
		Resp []struct {
			Code         int
			DeviceSecret string `json:"device_secret"`
		}
	}
	r.decode(e.t, &out)
	secrets := make([]string, len(names))
	for i, el := range out.Resp {
		if el.Code != 0 {
			e.t.Fatalf("create %s: %s", names[i], r.body)
		}
		secrets[i] = el.DeviceSecret
	}
	return secrets
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// wantError asserts the API's error body with the status and code, and
// that the message contains each of the fragments.
func (r response) wantError(t *testing.T, status, code int, fragments ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var body struct {
		Error struct {
			Code    int
			Message string
		}
	}
	r.decode(t, &body)
	if body.Error.Code != code {
		t.Fatalf("error code %d, want %d; body %s", body.Error.Code, code, r.body)
	}
	for _, f := range fragments {
		if !strings.Contains(body.Error.Message, f) {
			t.Errorf("error message %q does not mention %q", body.Error.Message, f)
		}
	}
}

func (r response) wantOK(t *testing.T) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d, want 200; body %s", r.status, r.body)
	}
}
