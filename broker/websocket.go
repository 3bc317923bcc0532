package broker

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// WebSocketPath is where MQTT over WebSocket is served; other paths answer
// 404 (docs/device-protocol.md, "Connecting").
const WebSocketPath = "/mqtt"

// wsListener serves MQTT over WebSocket on /mqtt only. mochi's own
// listener answers on every path and binds its address itself.
type wsListener struct {
	id       string
	ln       net.Listener
	srv      *http.Server
	upgrader websocket.Upgrader
	log      *slog.Logger
	once     sync.Once
	// establish is set by Serve before the first connection is accepted.
	establish listeners.EstablishFn
}

var _ listeners.Listener = (*wsListener)(nil)

func newWebsocket(id string, ln net.Listener) *wsListener {
	return &wsListener{
		id: id,
		ln: ln,
		upgrader: websocket.Upgrader{
			Subprotocols: []string{"mqtt"},
			// Devices are not browsers; credentials, not origins, admit them.
			CheckOrigin: func(*http.Request) bool { return true },
		},
	}
}

func (l *wsListener) ID() string       { return l.id }
func (l *wsListener) Address() string  { return l.ln.Addr().String() }
func (l *wsListener) Protocol() string { return "ws" }

func (l *wsListener) Init(log *slog.Logger) error {
	l.log = log
	mux := http.NewServeMux()
	mux.HandleFunc(WebSocketPath, func(w http.ResponseWriter, r *http.Request) {
		c, err := l.upgrader.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade has answered with an HTTP error
		}
		defer c.Close()
		_ = c.UnderlyingConn().SetDeadline(time.Now().Add(ConnectTimeout))
		if err := l.establish(l.id, &wsConn{Conn: c.UnderlyingConn(), ws: c}); err != nil {
			l.log.Debug("websocket client ended", "err", err)
		}
	})
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return nil
}

func (l *wsListener) Serve(establish listeners.EstablishFn) {
	l.establish = establish
	// Closed either way at a shutdown: the server (ErrServerClosed) or,
	// when the broker closes its bound listeners first, the listener.
	if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		l.log.Error("serve mqtt websocket", "err", err)
	}
}

func (l *wsListener) Close(closeClients listeners.CloseFn) {
	l.once.Do(func() {
		_ = l.srv.Close()
		_ = l.ln.Close() // in case Serve never ran
	})
	closeClients(l.id)
}

// wsConn reads and writes MQTT bytes as binary WebSocket messages; an MQTT
// packet may span messages and a message may hold several packets.
type wsConn struct {
	net.Conn
	ws *websocket.Conn
	r  io.Reader // the message being read, nil between messages
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errors.New("mqtt over websocket needs binary messages")
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

// SetWriteDeadline bounds the websocket's writes: gorilla sets the
// connection's write deadline to its own before every frame, so setting
// the connection's (the embedded net.Conn) would be overwritten.
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *wsConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
