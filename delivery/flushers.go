package delivery

import "time"

// flusherIdle is how long a flusher waits for another route to flush
// before it exits.
const flusherIdle = time.Second

// runFlusher flushes r, then any route start hands it while it waits, until
// it has been idle for flusherIdle. A goroutine starts with a 2 KiB stack
// and a flush that publishes grows it to 16 KiB (the MQTT encoding is
// deep): a new goroutine per flush copied its stack three times, 6.6% of
// the server's CPU in fan-out. A flusher that has grown keeps its stack
// for the next route. Idle devices are unaffected: the flushers exit a
// second after the last flush.
func (d *Dispatcher) runFlusher(r *route) {
	var idle *time.Timer
	for {
		d.flushRoute(r)
		if idle == nil {
			idle = time.NewTimer(flusherIdle)
		} else {
			idle.Reset(flusherIdle)
		}
		if r = d.nextRoute(idle); r == nil {
			return
		}
	}
}

// waitFrame is the stack a waiting flusher keeps in use: the garbage
// collector halves the stack of a goroutine that uses under a quarter of
// it, and a flusher waiting in a shallow frame had its 16 KiB stack
// halved and grown again by the next publish (copied twice, 1.5% of the
// server's CPU in fan-out). A quarter of 16 KiB is 4 KiB.
const waitFrame = 5 << 10

// nextRoute waits for a route to flush, nil once idle fires, with
// waitFrame bytes of stack in use.
//
//go:noinline
func (d *Dispatcher) nextRoute(idle *time.Timer) *route {
	var frame [waitFrame]byte
	useStack(frame[:])
	select {
	case r := <-d.idleFlushers:
		return r
	case <-idle.C:
		return nil
	}
}

// useStack keeps b on the caller's frame: the compiler may not drop a
// buffer passed to a function it does not inline.
//
//go:noinline
func useStack(b []byte) { b[0] = 0 }

// flushRoute flushes r until no flush was asked for meanwhile.
func (d *Dispatcher) flushRoute(r *route) {
	for {
		d.flush(r)
		r.runMu.Lock()
		if !r.again {
			r.running = false
			r.runMu.Unlock()
			return
		}
		r.again = false
		r.runMu.Unlock()
	}
}
