package delivery

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// goroutineConn records, for each publish, the goroutine that made it.
type goroutineConn struct {
	conn
	mu         sync.Mutex
	goroutines map[string]bool
}

func (c *goroutineConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	c.mu.Lock()
	c.goroutines[string(id)] = true
	c.mu.Unlock()
	return c.conn.Publish(topic, payload, qos)
}

// TestFlushesReuseTheirGoroutine checks that flushes one after another run
// on one goroutine, which keeps the stack it grew, and that it exits once
// idle, so idle devices hold none.
func TestFlushesReuseTheirGoroutine(t *testing.T) {
	f := newFixture(t)
	c := &goroutineConn{goroutines: map[string]bool{}}
	f.d.Attach(c, "app", "dev-1")
	for i := range 10 {
		f.send(t, 60)
		eventually(t, "the message sent", func() bool { return len(c.received()) == i+1 })
		// Wait for the flush to end and its flusher to wait for the next
		// (not merely the route to be idle: a flusher between the two
		// is not there to take it, which made this test flaky under
		// load), so the next one needs a goroutine.
		eventually(t, "the flush done", func() bool { return f.idle() && flusherWaiting() })
	}
	c.mu.Lock()
	n := len(c.goroutines)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("10 flushes ran on %d goroutines, want 1", n)
	}
	eventually(t, "the flusher to exit", func() bool { return !stacksContain("runFlusher") })
}

// flusherWaiting reports whether a flusher waits for a route to flush.
func flusherWaiting() bool { return stacksContain("(*Dispatcher).nextRoute") }

// stacksContain reports whether a goroutine's stack names fn.
func stacksContain(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// deepConn publishes from deep in the stack, as mochi's encoding does,
// and records where on the stack its deepest frame was.
type deepConn struct {
	conn
	mu    sync.Mutex
	depth []uintptr
}

//go:noinline
func deepFrame(n int) uintptr {
	var b [512]byte
	if n == 0 {
		return uintptr(unsafe.Pointer(&b[0]))
	}
	a := deepFrame(n - 1)
	useStack(b[:])
	return a
}

func (c *deepConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	a := deepFrame(16) // about 9 KiB: the stack grows to 16 KiB
	c.mu.Lock()
	c.depth = append(c.depth, a)
	c.mu.Unlock()
	return c.conn.Publish(topic, payload, qos)
}

// TestWaitingFlusherKeepsItsStack checks that a garbage collection while
// a flusher waits leaves its grown stack alone: the deep frame of the
// next publish is where it was (a stack halved and grown again moves).
func TestWaitingFlusherKeepsItsStack(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // only the GCs below
	f := newFixture(t)
	c := &deepConn{}
	f.d.Attach(c, "app", "dev-1")
	for i := range 4 {
		if i == 3 {
			runtime.GC()
			runtime.GC()
		}
		f.send(t, 60)
		eventually(t, "the message sent", func() bool { return len(c.received()) == i+1 })
		eventually(t, "the flush done", f.idle)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The first publish grew the stack; the others ran on the same one.
	if c.depth[1] != c.depth[2] {
		t.Fatalf("publishes without a GC between at %#x and %#x: the flushes did not run alike", c.depth[1], c.depth[2])
	}
	if c.depth[3] != c.depth[2] {
		t.Errorf("after a GC the publish ran at %#x, before at %#x: the waiting flusher's stack was moved", c.depth[3], c.depth[2])
	}
}
