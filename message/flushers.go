package message

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
		select {
		case r = <-d.idleFlushers:
		case <-idle.C:
			return
		}
	}
}

// flushRoute flushes r until no flush was asked for meanwhile.
func (d *Dispatcher) flushRoute(r *route) {
	for {
		d.flush(r)
		r.mu.Lock()
		if !r.again {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}
