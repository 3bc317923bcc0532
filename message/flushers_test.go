package message

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
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
		// Wait for the flush to end, so the next one needs a goroutine.
		eventually(t, "the flush done", f.idle)
	}
	c.mu.Lock()
	n := len(c.goroutines)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("10 flushes ran on %d goroutines, want 1", n)
	}
	eventually(t, "the flusher to exit", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "runFlusher")
	})
}
