package broker

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log sink that the broker's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestCloseLogsNoError: closing the broker, as a shutdown does, logs no
// error for its listeners closing (the WebSocket listener logged "use of
// closed network connection" at every SIGTERM).
func TestCloseLogsNoError(t *testing.T) {
	var out lockedBuffer
	b := New(Config{TCPAddr: "127.0.0.1:0", WSAddr: "127.0.0.1:0", ServiceTopics: []string{"msg"}},
		&fakeHandler{}, slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	addrs, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	stalledDevice(t, "ws", addrs["ws"]) // a live WebSocket connection at the close
	waitUntil(t, "the session", func() bool { return b.Session("app", "dev") != nil })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the session ended", func() bool { return b.Session("app", "dev") == nil })
	if s := out.String(); strings.Contains(s, "level=ERROR") {
		t.Fatalf("close logged an error:\n%s", s)
	}
}
