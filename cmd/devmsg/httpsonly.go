package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/devmsg/devmsg/restapi"
)

// tlsHandshake is the first byte of every TLS connection: the record type
// of the ClientHello.
const tlsHandshake = 0x16

// plainHTTPTimeout bounds how long a new connection may take to send its
// first byte, and a plain HTTP one its request.
const plainHTTPTimeout = 10 * time.Second

// httpsOnlyListener is the HTTPS listener of the API. A connection that
// starts a TLS handshake is handed to the server as a *tls.Conn, as
// tls.NewListener would; one that starts with anything else (plain HTTP
// sent to the HTTPS port) is answered, in plain HTTP, with the API's
// error body, 400/1003, and closed (docs/api.md, "Conventions"), instead
// of Go's text "Client sent an HTTP request to an HTTPS server". Each connection's first byte is
// awaited on a goroutine of its own, so a silent client holds up no other.
type httpsOnlyListener struct {
	net.Listener
	config *tls.Config
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	err    error // why done was closed; set before
}

func newHTTPSOnlyListener(inner net.Listener, config *tls.Config) *httpsOnlyListener {
	l := &httpsOnlyListener{Listener: inner, config: config, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *httpsOnlyListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			l.stop(err)
			return
		}
		if err != nil {
			// Out of file descriptors or the like: wait, as http.Server does.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go l.sniff(c)
	}
}

func (l *httpsOnlyListener) stop(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

// sniff reads the first byte of c and sends it on its way.
func (l *httpsOnlyListener) sniff(c net.Conn) {
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(plainHTTPTimeout))
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br}
	if first[0] != tlsHandshake {
		answerPlainHTTP(pc)
		return
	}
	select {
	case l.conns <- tls.Server(pc, l.config):
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next TLS connection.
func (l *httpsOnlyListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close stops accepting; connections being sniffed are closed.
func (l *httpsOnlyListener) Close() error {
	l.stop(net.ErrClosed)
	return l.Listener.Close()
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// answerPlainHTTP reads the plain HTTP request on c (so closing does not
// reset the connection before the client reads the answer), answers 400
// with code 1003, and closes c.
func answerPlainHTTP(c *peekedConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(plainHTTPTimeout))
	if req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 64<<10))); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, 64<<10))
	}
	body := restapi.ErrorBody(restapi.CodeInvalidParam, "plain HTTP was sent to the HTTPS port: this port speaks HTTPS only; use an https:// URL")
	_, _ = fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
