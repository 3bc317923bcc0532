package listeners

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failingListener fails its first failures Accepts with err, then accepts
// from the real listener.
type failingListener struct {
	net.Listener
	mu       sync.Mutex
	failures int
	err      error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.failures > 0 {
		l.failures--
		l.mu.Unlock()
		return nil, l.err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A listener out of file descriptors for a moment goes on serving once it
// has some again: upstream's Serve returned at the first failed Accept and
// the port, still open, took connections nobody served. The failures are
// logged once, not once each.
func TestServeSurvivesTemporaryAcceptErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	for _, tt := range []struct {
		name  string
		serve func(ln net.Listener, log *slog.Logger, establish EstablishFn) (stop func())
	}{
		{"Net", func(ln net.Listener, log *slog.Logger, establish EstablishFn) func() {
			l := NewNet("t1", ln)
			require.NoError(t, l.Init(log))
			go l.Serve(establish)
			return func() { l.Close(MockCloser) }
		}},
		{"TCP", func(ln net.Listener, log *slog.Logger, establish EstablishFn) func() {
			l := NewTCP(Config{ID: "t1"})
			l.log, l.listen = log, ln
			go l.Serve(establish)
			return func() { l.Close(MockCloser) }
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ln := &failingListener{Listener: n, failures: 8, err: emfile}
			logs := &lockedBuffer{}
			established := make(chan string, 1)
			stop := tt.serve(ln, slog.New(slog.NewTextHandler(logs, nil)), func(id string, c net.Conn) error {
				established <- id
				return c.Close()
			})
			defer stop()

			c, err := net.Dial("tcp", n.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			select {
			case id := <-established:
				require.Equal(t, "t1", id)
			case <-time.After(10 * time.Second):
				t.Fatal("the connection made after failed accepts was never established")
			}
			require.Equal(t, 1, strings.Count(logs.String(), "accept failed; retrying"), logs.String())
			require.Contains(t, logs.String(), "too many open files")
		})
	}
}

// An error that no retry can mend ends Serve, logged; closing the listener
// ends it quietly.
func TestServeEndsOnPermanentAcceptError(t *testing.T) {
	n, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer n.Close()
	logs := &lockedBuffer{}
	l := NewNet("t1", &failingListener{Listener: n, failures: 1, err: errors.New("broken")})
	require.NoError(t, l.Init(slog.New(slog.NewTextHandler(logs, nil))))
	done := make(chan struct{})
	go func() { l.Serve(MockEstablisher); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve went on after a permanent accept error")
	}
	require.Contains(t, logs.String(), "listener stopped")

	n2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logs2 := &lockedBuffer{}
	l2 := NewNet("t2", n2)
	require.NoError(t, l2.Init(slog.New(slog.NewTextHandler(logs2, nil))))
	done2 := make(chan struct{})
	go func() { l2.Serve(MockEstablisher); close(done2) }()
	l2.Close(MockCloser)
	<-done2
	require.Empty(t, logs2.String())
}
