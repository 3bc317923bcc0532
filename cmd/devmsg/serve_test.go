package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store/redis/redistest"
)

// server is a whole devmsg service running in-process: a Main and what
// it wrote.
type server struct {
	m      *Main
	addr   string            // the HTTP address
	mqtt   map[string]string // MQTT listener addresses: tcp, tls, ws
	stdout *bytes.Buffer     // complete once running: secrets print before listening
	stderr *syncBuffer       // the slog output, written while serving
}

// syncBuffer is a bytes.Buffer the server may write while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testArgs bind every port on 127.0.0.1:0; the args a test passes come
// after them and win.
var testArgs = []string{"--http.addr", "127.0.0.1:0", "--log.level", "warn",
	"--mqtt.tcp_addr", "127.0.0.1:0", "--mqtt.tls_addr", "127.0.0.1:0", "--mqtt.ws_addr", "127.0.0.1:0"}

// testConfig is the config `devmsg serve` would run with testArgs and
// args, its data in t.TempDir() unless args name a data_dir.
func testConfig(t *testing.T, args ...string) Config {
	t.Helper()
	cfg, err := loadConfig(append(append([]string{"--data_dir", t.TempDir()}, testArgs...), args...), serveEnviron())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// MustRunMain runs a whole service with cfg in-process and returns once it
// serves; the test's end closes it. The bound addresses come from Main.
func MustRunMain(t *testing.T, cfg Config) *server {
	t.Helper()
	s := &server{m: NewMain(), stdout: &bytes.Buffer{}, stderr: &syncBuffer{}}
	s.m.Config, s.m.Stdout, s.m.Stderr = cfg, s.stdout, s.stderr
	if err := s.m.Run(context.Background()); err != nil {
		_ = s.m.Close()
		t.Fatalf("serve: %v\n%s", err, s.stderr)
	}
	s.addr, s.mqtt = s.m.HTTPAddr(), s.m.MQTTAddrs()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// startServer runs `devmsg serve` with args in-process, on 127.0.0.1:0.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return MustRunMain(t, testConfig(t, args...))
}

// stop closes the server, as a signal to `devmsg serve` would, and fails
// the test unless it stops cleanly.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if s.m == nil {
		return
	}
	m := s.m
	s.m = nil
	done := make(chan error, 1)
	go func() { done <- m.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Error("serve did not stop")
	}
}

// TestMainCloseAfterFailedRun: a start that fails after binding its ports
// (here, on an unreachable store) prints nothing, and Close releases the
// ports; a second Close, of a failed or a served Main, is harmless.
func TestMainCloseAfterFailedRun(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	var stdout bytes.Buffer
	m := NewMain()
	m.Config = testConfig(t, "--http.addr", addr, "--store.type", "redis", "--store.redis.addrs", "127.0.0.1:1")
	m.Stdout, m.Stderr = &stdout, io.Discard
	if err := m.Run(context.Background()); err == nil {
		m.Close()
		t.Fatal("Run on an unreachable Redis succeeded")
	}
	if stdout.Len() != 0 {
		t.Errorf("a failed start printed %q", stdout.String())
	}
	for range 2 {
		if err := m.Close(); err != nil {
			t.Fatalf("Close after a failed Run: %v", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("http.addr still bound after Close: %v", err)
	}
	ln.Close()

	// A served Main closes once; a later Close (here the test's cleanup)
	// returns the first one's result.
	s := startServer(t, "--http.tls.enabled=false", "--admin.password", "pw")
	if err := s.m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

var (
	appLineRE   = regexp.MustCompile(`app created: name=default key=(\S+) master_secret=(\S+)`)
	adminLineRE = regexp.MustCompile(`admin account: username=admin password=(\S{20})\n`)
)

func TestServeFirstStartAndRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "--data_dir", dir)
	out := s.stdout.String()
	app, admin := appLineRE.FindAllStringSubmatch(out, -1), adminLineRE.FindAllStringSubmatch(out, -1)
	if len(app) != 1 || len(admin) != 1 {
		t.Fatalf("first start must print one app and one admin password, printed %q", out)
	}
	key, masterSecret, adminPassword := app[0][1], app[0][2], admin[0][1]
	for _, secret := range []string{masterSecret, adminPassword} {
		if strings.Contains(s.stderr.String(), secret) {
			t.Errorf("a secret reached the log: %s", s.stderr)
		}
	}

	// Trust only data_dir/tls/cert.pem: the generated certificate must
	// verify for 127.0.0.1.
	certPEM, err := os.ReadFile(filepath.Join(dir, "tls", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	call := func(addr, user, pass, path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatalf("GET %s: not served over TLS", path)
		}
		return resp.StatusCode, resp.TLS.PeerCertificates[0].Raw
	}
	code, firstCert := call(s.addr, "", "", "/healthz")
	if code != 200 {
		t.Fatalf("GET /healthz: %d", code)
	}
	// The printed credentials work: the app's on the REST API (400: the
	// device is unknown, so authentication passed) and the admin's.
	if c, _ := call(s.addr, key, masterSecret, "/device/v1/status?device_name=nobody"); c != 400 {
		t.Fatalf("status with the printed app credentials: %d, want 400 (unknown device)", c)
	}
	if c, _ := call(s.addr, "admin", adminPassword, "/admin/v1/apps"); c != 200 {
		t.Fatalf("admin API with the printed password: %d", c)
	}
	s.stop(t)

	s2 := startServer(t, "--data_dir", dir)
	if s2.stdout.Len() != 0 {
		t.Errorf("restart printed %q; secrets must be shown once", s2.stdout.String())
	}
	code, secondCert := call(s2.addr, key, masterSecret, "/device/v1/status?device_name=nobody")
	if code != 400 {
		t.Fatalf("after restart, the first start's app credentials: %d", code)
	}
	if !bytes.Equal(firstCert, secondCert) {
		t.Error("restart serves a different certificate; it must be generated once and reused")
	}
	if c, _ := call(s2.addr, "admin", adminPassword, "/admin/v1/apps"); c != 200 {
		t.Fatalf("after restart, the generated admin password: %d", c)
	}
	s2.stop(t) // fails the test unless serve returns nil
}

// TestServeOnRedis runs the service on the Redis store: a device gets a
// message, and the message and the device are there after a restart.
func TestServeOnRedis(t *testing.T) {
	if !redistest.Installed() {
		t.Skip(redistest.NotInstalled)
	}
	t.Parallel()
	srv, err := redistest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	f := newFleet(t, "--store.type", "redis", "--store.redis.addrs", srv.Addr)
	secret := f.createDevice("redis-1")
	d := f.mustConnect("redis-1", secret, "msg")
	id := f.send("redis-1", "through redis", 60)
	f.waitState(id, "delivered")
	if got := d.received(); len(got) != 1 || got[0] != fmt.Sprint(id) {
		t.Fatalf("device received %v", got)
	}
	d.c.Disconnect(0)
	f.s.stop(t)

	f.s = startServer(t, "--data_dir", t.TempDir(), "--config", "../../configs/devmsg.yaml", "--http.tls.enabled=false",
		"--admin.password", "pw", "--store.type", "redis", "--store.redis.addrs", srv.Addr)
	if m := f.message(id); m.State != "delivered" || len(m.Records) != 3 {
		t.Fatalf("after a restart on the same Redis: %+v", m)
	}
	f.mustConnect("redis-1", secret, "msg")

	err = run(context.Background(), append(append([]string{"serve", "--data_dir", t.TempDir()}, testArgs...),
		"--store.type", "redis", "--store.redis.addrs", "127.0.0.1:1"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "redis") {
		t.Fatalf("an unreachable Redis: %v", err)
	}
}

func TestServeConfiguredApps(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "--config", "../../configs/devmsg.yaml", "--data_dir", dir, "--http.tls.enabled=false", "--admin.password", "pw")
	if strings.Contains(s.stdout.String(), "app created") || strings.Contains(s.stdout.String(), "admin account") {
		t.Errorf("printed %q with configured apps and admin password", s.stdout.String())
	}
	status := func(addr, key, masterSecret string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/device/v1/status?device_name=nobody", nil)
		req.SetBasicAuth(key, masterSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := status(s.addr, "demo-app-key", "demo-master-secret"); c != 400 {
		t.Fatalf("configured app over plain HTTP: %d, want 400 (unknown device)", c)
	}
	s.stop(t)

	// The config now disagrees with the stored app: the stored one stays
	// (it may have been changed through the admin API) and a warning says
	// so without printing either secret.
	changed := filepath.Join(t.TempDir(), "changed.yaml")
	if err := os.WriteFile(changed, []byte("apps:\n  - {name: demo, key: demo-app-key, master_secret: rotated-secret}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, "--config", changed, "--data_dir", dir, "--http.tls.enabled=false", "--admin.password", "pw")
	logs := s2.stderr.String()
	if !strings.Contains(logs, "configured app differs from the stored one") || !strings.Contains(logs, "key=demo-app-key") {
		t.Errorf("no warning about the changed app; log:\n%s", logs)
	}
	if strings.Contains(logs, "rotated-secret") || strings.Contains(logs, "demo-master-secret") {
		t.Errorf("a master secret reached the log:\n%s", logs)
	}
	if c := status(s2.addr, "demo-app-key", "demo-master-secret"); c != 400 {
		t.Fatalf("stored master secret after config change: %d, want 400", c)
	}
}

// TestGracefulShutdown starts a request, asks the server to stop while
// the request body is still arriving, and expects the request to finish.
func TestGracefulShutdown(t *testing.T) {
	s := startServer(t, "--data_dir", t.TempDir(), "--http.tls.enabled=false", "--admin.password", "pw")
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+s.addr+"/admin/v1/apps", pr)
	req.SetBasicAuth("admin", "pw")
	got := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("in-flight request: %v", err)
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"name":`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the handler is now reading the body
	stopped := make(chan struct{})
	go func() { s.stop(t); close(stopped) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-stopped:
		t.Fatal("server stopped with a request in flight")
	default:
	}
	pw.Write([]byte(`"late"}`))
	pw.Close()
	if code := <-got; code != 200 {
		t.Fatalf("in-flight request got %d", code)
	}
	<-stopped
}

func TestSubcommands(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "devmsg ") {
		t.Fatalf("version: %v %q", err, out.String())
	}
	var errOut bytes.Buffer
	if err := run(context.Background(), []string{"nope"}, io.Discard, &errOut); err == nil || !strings.Contains(errOut.String(), "usage") {
		t.Fatalf("unknown subcommand: %v %q", err, errOut.String())
	}
}
