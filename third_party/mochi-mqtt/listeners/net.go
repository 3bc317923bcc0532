// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: Jeroen Rinzema

package listeners

import (
	"net"
	"sync"
	"sync/atomic"

	"log/slog"
)

// Net is a listener for establishing client connections on basic TCP protocol.
type Net struct { // [MQTT-4.2.0-1]
	mu       sync.Mutex
	listener net.Listener // a net.Listener which will listen for new clients
	id       string       // the internal id of the listener
	log      *slog.Logger // server logger
	end      uint32       // ensure the close methods are only called once
}

// NewNet initialises and returns a listener serving incoming connections on the given net.Listener
func NewNet(id string, listener net.Listener) *Net {
	return &Net{
		id:       id,
		listener: listener,
	}
}

// ID returns the id of the listener.
func (l *Net) ID() string {
	return l.id
}

// Address returns the address of the listener.
func (l *Net) Address() string {
	return l.listener.Addr().String()
}

// Protocol returns the network of the listener.
func (l *Net) Protocol() string {
	return l.listener.Addr().Network()
}

// Init initializes the listener.
func (l *Net) Init(log *slog.Logger) error {
	l.log = log
	return nil
}

// Serve starts waiting for new TCP connections, and calls the establish
// connection callback for any received. A temporary failure to accept is
// retried (acceptLoop).
func (l *Net) Serve(establish EstablishFn) {
	acceptLoop(l.id, l.listener, &l.end, l.log, func(conn net.Conn) {
		go l.establish(establish, conn)
	})
}

// establish runs establish for the connection, which lasts as long as the
// connection. The goroutine's first frame stays on its stack throughout,
// so the logging, whose arguments take a large frame, is a call of its
// own, made when establish has returned. (The error is a variable of this
// goroutine's: the closure this replaces assigned the one of Serve, shared
// by every connection's goroutine.)
func (l *Net) establish(establish EstablishFn, conn net.Conn) {
	if err := establish(l.id, conn); err != nil {
		l.logEnded(err)
	}
}

//go:noinline
func (l *Net) logEnded(err error) {
	l.log.Warn("", "error", err)
}

// Close closes the listener and any client connections.
func (l *Net) Close(closeClients CloseFn) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if atomic.CompareAndSwapUint32(&l.end, 0, 1) {
		closeClients(l.id)
	}

	if l.listener != nil {
		err := l.listener.Close()
		if err != nil {
			return
		}
	}
}
