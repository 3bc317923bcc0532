// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package listeners

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Backoff of a listener whose Accept fails with a temporary error, as
// net/http's Server.Serve does: 5 ms doubling up to a second, reset by the
// next connection accepted.
const (
	acceptRetryFirst = 5 * time.Millisecond
	acceptRetryMax   = time.Second
	// acceptLogEvery is the least time between two log lines about
	// failing accepts; the failures in between are counted in the next.
	acceptLogEvery = 10 * time.Second
)

// acceptLoop accepts connections from ln until end is set or Accept fails
// for good, and hands each to handle. A temporary failure (the process or
// the system is out of file descriptors, memory or buffers, or a client
// aborted before it was accepted) is retried after a backoff instead of
// ending the listener: the port would otherwise stay open in the kernel,
// taking connections that nobody serves.
func acceptLoop(id string, ln net.Listener, end *uint32, log *slog.Logger, handle func(net.Conn)) {
	var (
		delay    time.Duration
		lastLog  time.Time
		unlogged int
	)
	for {
		if atomic.LoadUint32(end) == 1 {
			return
		}
		conn, err := ln.Accept()
		if err == nil {
			delay = 0
			if atomic.LoadUint32(end) == 0 {
				handle(conn)
			} else {
				_ = conn.Close()
			}
			continue
		}
		if atomic.LoadUint32(end) == 1 || errors.Is(err, net.ErrClosed) {
			return
		}
		if !temporaryAcceptError(err) {
			if log != nil {
				log.Error("listener stopped: accept failed", "listener", id, "error", err)
			}
			return
		}
		delay = min(max(2*delay, acceptRetryFirst), acceptRetryMax)
		unlogged++
		if now := time.Now(); log != nil && now.Sub(lastLog) >= acceptLogEvery {
			log.Warn("accept failed; retrying", "listener", id, "error", err, "failures", unlogged, "retry_in", delay)
			lastLog, unlogged = now, 0
		}
		time.Sleep(delay)
	}
}

// temporaryAcceptError reports whether a failed Accept may succeed if
// tried again.
func temporaryAcceptError(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne interface{ Temporary() bool }
	return errors.As(err, &ne) && ne.Temporary()
}
