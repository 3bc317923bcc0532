package main

import (
	"bytes"
	"net"
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
			cmd := exec.Command(bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("serve with %s busy did not exit; stdout %q stderr:\n%s", flag, stdout.String(), stderr.String())
			}
			if err == nil {
				t.Fatalf("serve with %s busy exited 0", flag)
			}
			if !strings.Contains(stderr.String(), busy.Addr().String()) {
				t.Errorf("the error does not name %s:\n%s", busy.Addr(), stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("a failed start printed %q; shown-once credentials must not be spent", stdout.String())
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

// startProcQuiet runs the binary with args (no admin password set) and
// waits until it serves HTTP.
func startProcQuiet(t *testing.T, bin string, args []string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
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
