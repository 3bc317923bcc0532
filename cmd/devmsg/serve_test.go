package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is `devmsg serve` running in-process.
type server struct {
	addr   string
	stdout *bytes.Buffer
	cancel context.CancelFunc
	done   chan error
}

var hookMu sync.Mutex

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	hookMu.Lock()
	addrs := make(chan string, 1)
	testHookListening = func(a string) { addrs <- a }
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{stdout: &bytes.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() {
		s.done <- run(ctx, append([]string{"serve", "--http.addr", "127.0.0.1:0", "--log.level", "warn"}, args...), s.stdout, io.Discard)
	}()
	select {
	case s.addr = <-addrs:
	case err := <-s.done:
		t.Fatalf("serve exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not listen")
	}
	testHookListening = nil
	hookMu.Unlock()
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *server) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Error("serve did not stop")
	}
}

func TestServeFirstStartAndRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "--data_dir", dir)
	out := s.stdout.String()
	m := regexp.MustCompile(`key=(\S+) master_secret=(\S+)`).FindStringSubmatch(out)
	if m == nil || !regexp.MustCompile(`admin account: username=admin password=\S{20}`).MatchString(out) {
		t.Fatalf("first start printed %q", out)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, "tls", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	call := func(addr, path string) int {
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		req.SetBasicAuth(m[1], m[2])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The generated certificate verifies for 127.0.0.1 and the printed
	// credentials work.
	if c := call(s.addr, "/healthz"); c != 200 {
		t.Fatalf("healthz %d", c)
	}
	if c := call(s.addr, "/device/v1/status?device_name=nobody"); c != 400 {
		t.Fatalf("status with printed credentials: %d, want 400 (unknown device)", c)
	}
	s.stop(t)

	s2 := startServer(t, "--data_dir", dir)
	if s2.stdout.Len() != 0 {
		t.Errorf("restart printed %q; secrets must be shown once", s2.stdout.String())
	}
	if c := call(s2.addr, "/device/v1/status?device_name=nobody"); c != 400 {
		t.Fatalf("after restart, same certificate and credentials: %d", c)
	}
}

func TestServeConfiguredApps(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "--config", "../../configs/devmsg.yaml", "--data_dir", dir, "--http.tls.enabled=false", "--admin.password", "pw")
	if strings.Contains(s.stdout.String(), "app created") || strings.Contains(s.stdout.String(), "admin account") {
		t.Errorf("printed %q with configured apps and admin password", s.stdout.String())
	}
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/device/v1/status?device_name=nobody", nil)
	req.SetBasicAuth("demo-app-key", "demo-master-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("configured app over plain HTTP: %d", resp.StatusCode)
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
