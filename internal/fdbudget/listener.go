package fdbudget

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Class says how deep into the reserve a listener's connections may go.
type Class int

const (
	// Devices are refused before the reserve is touched.
	Devices Class = iota
	// Other connections (the REST API: operators, readiness probes, app
	// servers) may use half of the reserve.
	Other
)

// Accept's backoff after a temporary failure, as net/http's: 5 ms doubling
// to a second, and one log line at most every ten seconds.
const (
	retryFirst = 5 * time.Millisecond
	retryMax   = time.Second
	logEvery   = 10 * time.Second
)

// Config is one listener's admission rules.
type Config struct {
	// Name names the listener in logs and metrics ("mqtt-tcp", "http").
	Name  string
	Class Class
	// PerSource caps the connections open from one IP address; 0 is no cap.
	PerSource int
	// Sources counts the connections by address; listeners given the same
	// Sources share their cap. nil: the listener's own.
	Sources *Sources
	Log     *slog.Logger
}

// Sources counts open connections by source address.
type Sources struct {
	mu sync.Mutex
	n  map[string]int
}

// NewSources returns an empty count.
func NewSources() *Sources { return &Sources{n: map[string]int{}} }

// take counts one more from src unless that would pass max (0: no cap).
func (s *Sources) take(src string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if max > 0 && s.n[src] >= max {
		return false
	}
	s.n[src]++
	return true
}

func (s *Sources) release(src string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[src] <= 1 {
		delete(s.n, src)
	} else {
		s.n[src]--
	}
}

// Listener admits the connections of a net.Listener: a connection over the
// budget or its source's cap is closed as soon as it is accepted, before
// anything is read from it, and counted.
type Listener struct {
	net.Listener
	b   *Budget
	cfg Config

	mu sync.Mutex // guards lastLog and unlogged

	refusedBudget, refusedSource, acceptErrors atomic.Int64
	// failingSince is when Accept began to fail (unix ns), 0 while it
	// accepts; failErr is the last failure.
	failingSince atomic.Int64
	failErr      atomic.Pointer[string]
	stopped      atomic.Pointer[string] // set when Accept failed for good

	lastLog  time.Time // under mu
	unlogged int
	// lastRefusal is when the last refusal over the budget was logged,
	// refusedLogged how many had been refused then (both under mu).
	lastRefusal   time.Time
	refusedLogged int64
}

var _ net.Listener = (*Listener)(nil)

// Listen wraps ln in the budget.
func (b *Budget) Listen(ln net.Listener, cfg Config) *Listener {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Sources == nil {
		cfg.Sources = NewSources()
	}
	return &Listener{Listener: ln, b: b, cfg: cfg}
}

// Accept returns the next admitted connection. A temporary failure to
// accept is retried after a backoff here, so the server above never sees
// it; any other failure is returned.
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			if !Temporary(err) {
				msg := err.Error()
				l.stopped.Store(&msg)
				l.cfg.Log.Error("listener stopped: accept failed", "listener", l.cfg.Name, "err", err)
				return nil, err
			}
			delay = min(max(2*delay, retryFirst), retryMax)
			l.failed(err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		l.failingSince.Store(0)
		if conn := l.admit(c); conn != nil {
			return conn, nil
		}
	}
}

// failed records and, rate-limited, logs a temporary accept failure.
func (l *Listener) failed(err error, delay time.Duration) {
	l.acceptErrors.Add(1)
	l.failingSince.CompareAndSwap(0, time.Now().UnixNano())
	msg := err.Error()
	l.failErr.Store(&msg)
	l.mu.Lock()
	l.unlogged++
	now := time.Now()
	if now.Sub(l.lastLog) < logEvery {
		l.mu.Unlock()
		return
	}
	n := l.unlogged
	l.lastLog, l.unlogged = now, 0
	l.mu.Unlock()
	l.cfg.Log.Warn("accept failed; retrying", "listener", l.cfg.Name, "err", err, "failures", n, "retry_in", delay,
		"open_connections", l.b.Open(), "fd_limit", l.b.limit)
}

// logRefusal logs refusals over the budget, at most every logEvery.
func (l *Listener) logRefusal() {
	l.mu.Lock()
	if time.Since(l.lastRefusal) < logEvery {
		l.mu.Unlock()
		return
	}
	n := l.refusedBudget.Load()
	since := n - l.refusedLogged
	l.lastRefusal, l.refusedLogged = time.Now(), n
	l.mu.Unlock()
	l.cfg.Log.Warn("refusing connections: out of file descriptors for clients", "listener", l.cfg.Name,
		"refused", since, "open_connections", l.b.Open(), "fd_limit", l.b.limit, "fd_reserve", l.b.reserve)
}

// admit counts c in, or closes it and counts the refusal.
func (l *Listener) admit(c net.Conn) net.Conn {
	src := sourceOf(c.RemoteAddr())
	if !l.b.roomFor(l.cfg.Class) {
		l.refusedBudget.Add(1)
		_ = c.Close()
		l.logRefusal()
		return nil
	}
	if !l.cfg.Sources.take(src, l.cfg.PerSource) {
		l.refusedSource.Add(1)
		_ = c.Close()
		return nil
	}
	l.b.open.Add(1)
	return &conn{Conn: c, l: l, src: src}
}

func (l *Listener) release(src string) {
	l.b.open.Add(-1)
	l.cfg.Sources.release(src)
}

// Refused returns the connections refused over the budget and over the
// per-source cap.
func (l *Listener) Refused() (budget, perSource int64) {
	return l.refusedBudget.Load(), l.refusedSource.Load()
}

// AcceptErrors returns how many accepts failed.
func (l *Listener) AcceptErrors() int64 { return l.acceptErrors.Load() }

// Name returns the listener's name.
func (l *Listener) Name() string { return l.cfg.Name }

// Check returns why the listener cannot take a connection now, nil while
// it can: it stopped, its accepts are failing, or (for devices) the
// budget has no room.
func (l *Listener) Check() error {
	if msg := l.stopped.Load(); msg != nil {
		return fmt.Errorf("listener %s stopped: %s", l.cfg.Name, *msg)
	}
	if since := l.failingSince.Load(); since != 0 {
		msg := ""
		if m := l.failErr.Load(); m != nil {
			msg = *m
		}
		return fmt.Errorf("listener %s cannot accept connections (for %s): %s", l.cfg.Name,
			time.Since(time.Unix(0, since)).Round(time.Millisecond), msg)
	}
	if l.cfg.Class == Devices {
		if err := l.b.Check(); err != nil {
			return fmt.Errorf("listener %s: %w", l.cfg.Name, err)
		}
	}
	return nil
}

// sourceOf is the IP address of a remote address.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP.To16())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn releases its place in the budget when closed, once.
type conn struct {
	net.Conn
	l      *Listener
	src    string
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.src)
	}
	return err
}

// Temporary reports whether a failed Accept may succeed if tried again:
// out of descriptors, memory or buffers, or a connection that went away
// before it was accepted.
func Temporary(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne interface{ Temporary() bool }
	return errors.As(err, &ne) && ne.Temporary()
}
