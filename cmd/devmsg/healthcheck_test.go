package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// devmsg healthcheck answers for the devmsg serving at the configured
// http.addr: ready (exit 0) while it serves, an error when nothing does.
func TestHealthcheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	p := startProc(t, t.TempDir())
	addr := strings.TrimPrefix(p.base, "https://")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// ":port" is asked on 127.0.0.1, as in a container.
	if err := run(context.Background(), []string{"healthcheck", "--data_dir", t.TempDir(), "--http.addr", ":" + port}, &out, &out); err != nil {
		t.Fatalf("healthcheck of a serving node: %v (%s)", err, out.String())
	}
	if got := out.String(); got != "ready\n" {
		t.Fatalf("healthcheck printed %q", got)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	if err := run(context.Background(), []string{"healthcheck", "--data_dir", t.TempDir(), "--http.addr", closed}, &out, &out); err == nil {
		t.Fatal("healthcheck with nothing serving succeeded")
	}
}
