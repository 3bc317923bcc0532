package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFirstStartBusyPort starts the real binary on an empty data_dir with
// one of its ports taken: it must fail naming the address before it
// creates or prints anything, so that the next start, with the port free,
// still prints the credentials shown once.
func TestFirstStartBusyPort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := devmsgBinary(t)
	for _, flag := range []string{"--http.addr", "--mqtt.tcp_addr", "--mqtt.tls_addr", "--mqtt.ws_addr"} {
		t.Run(strings.TrimPrefix(flag, "--"), func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			dataDir := filepath.Join(t.TempDir(), "data")
			args := []string{"serve", "--data_dir", dataDir, "--http.addr", "127.0.0.1:0",
				"--mqtt.tcp_addr", "127.0.0.1:0", "--mqtt.tls_addr", "127.0.0.1:0", "--mqtt.ws_addr", "127.0.0.1:0",
				flag, busy.Addr().String()}
			stderr := failedStart(t, bin, args)
			if !strings.Contains(stderr, busy.Addr().String()) {
				t.Errorf("the error does not name %s:\n%s", busy.Addr(), stderr)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("a failed start created data_dir (stat: %v)", err)
			}

			busy.Close()
			p := startProcQuiet(t, bin, args)
			out := p.stdout()
			if len(appLineRE.FindAllString(out, -1)) != 1 || len(adminLineRE.FindAllString(out, -1)) != 1 {
				t.Fatalf("the start after freeing the port printed %q, want the app and the admin password once", out)
			}
		})
	}
}

// TestFirstStartBadCert: a TLS certificate that cannot be loaded fails
// the first start before the credentials shown once are made.
func TestFirstStartBadCert(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := devmsgBinary(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	args := []string{"serve", "--data_dir", dataDir, "--http.addr", "127.0.0.1:0",
		"--mqtt.tcp_addr", "127.0.0.1:0", "--mqtt.tls_addr", "", "--mqtt.ws_addr", ""}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	stderr := failedStart(t, bin, append(args, "--http.tls.cert_file", missing, "--http.tls.key_file", missing))
	if !strings.Contains(stderr, missing) {
		t.Errorf("the error does not name %s:\n%s", missing, stderr)
	}
	out := startProcQuiet(t, bin, args).stdout()
	if len(appLineRE.FindAllString(out, -1)) != 1 || len(adminLineRE.FindAllString(out, -1)) != 1 {
		t.Fatalf("the start after fixing the certificate printed %q, want the app and the admin password once", out)
	}
}

// failedStart runs the binary with args, which must make it fail before
// it prints anything on stdout (where the credentials shown once go); it
// returns what it logged.
func failedStart(t *testing.T, bin string, args []string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = serveEnviron()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("serve %q did not exit; stdout %q stderr:\n%s", args, stdout.String(), stderr.String())
	}
	if err == nil {
		t.Fatalf("serve %q exited 0", args)
	}
	if stdout.Len() != 0 {
		t.Errorf("a failed start printed %q; shown-once credentials must not be spent", stdout.String())
	}
	return stderr.String()
}

// startProcQuiet runs the binary with args (no admin password set) and
// waits until it serves HTTP.
func startProcQuiet(t *testing.T, bin string, args []string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = serveEnviron()
	p := &proc{cmd: cmd, out: &strings.Builder{}, mu: &sync.Mutex{}}
	cmd.Stdout = &lockedWriter{p.out, p.mu}
	errOut := &lockedWriter{&strings.Builder{}, p.mu}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		m := listenRE.FindStringSubmatch(errOut.b.String())
		log := errOut.b.String()
		p.mu.Unlock()
		if m != nil {
			p.base = "https://" + m[1]
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("devmsg serve did not listen within 30s:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// TestServeRootAndURLs: the log names the console and API URLs of the
// bound address, and GET / leads a browser to the console.
func TestServeRootAndURLs(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--data_dir", t.TempDir(), "--http.tls.enabled=false", "--admin.password", "pw", "--log.level", "info")
	base := "http://" + s.addr + "/"
	if want := "console=" + base + "console/ api=" + base; !strings.Contains(s.stderr.String(), want) {
		t.Errorf("the start log lacks %q:\n%s", want, s.stderr)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, method := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(method, base, nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
			t.Errorf("%s /: %d Location %q, want 302 to /console/", method, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `id="login-admin"`) {
		t.Errorf("GET / followed: %d at %s, want the console's sign-in page", resp.StatusCode, resp.Request.URL)
	}
	// Other methods on / stay the API's.
	req, _ := http.NewRequest("POST", base, nil)
	resp, err = noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusFound {
		t.Errorf("POST / redirected")
	}
}

func TestBaseURL(t *testing.T) {
	for _, c := range []struct {
		addr string
		tls  bool
		want string
	}{
		{"[::]:8443", true, "https://localhost:8443/"},
		{"0.0.0.0:8443", true, "https://localhost:8443/"},
		{":8443", false, "http://localhost:8443/"},
		{"127.0.0.1:9000", false, "http://127.0.0.1:9000/"},
		{"[::1]:8443", true, "https://[::1]:8443/"},
		{"devmsg.example.com:443", true, "https://devmsg.example.com:443/"},
	} {
		if got := baseURL(c.addr, c.tls); got != c.want {
			t.Errorf("baseURL(%q, %v) = %q, want %q", c.addr, c.tls, got, c.want)
		}
	}
}

// TestServeDataDirInUse: a second serve on the data_dir of a running one
// says the data_dir is in use by another devmsg, and which, rather than
// repeating the lock's "resource temporarily unavailable".
func TestServeDataDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	first := startProc(t, dataDir)
	stderr := failedStart(t, devmsgBinary(t), []string{"serve", "--data_dir", dataDir, "--http.addr", "127.0.0.1:0",
		"--mqtt.tcp_addr=", "--mqtt.tls_addr=", "--mqtt.ws_addr="})
	want := fmt.Sprintf("data_dir %s is in use by another devmsg process (pid %d)", dataDir, first.cmd.Process.Pid)
	if !strings.Contains(stderr, want) {
		t.Errorf("second serve on the same data_dir said:\n%s\nwant it to say %q", stderr, want)
	}
	if strings.Contains(stderr, "temporarily unavailable") {
		t.Errorf("the error still reads as a lock failure:\n%s", stderr)
	}
}
