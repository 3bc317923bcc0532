package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TopicPrefix starts every device topic: d/{app_key}/{device_name}/...
const TopicPrefix = "d/"

// Defaults sized for large fleets of mostly idle devices (see Config and
// BENCHMARKS.md): device packets are small, and the outgoing queue only
// carries mochi's own writes, since the service writes to devices
// directly. Every idle connection holds its read buffer: 128 bytes hold a
// typical CONNECT or SUBSCRIBE whole, and a larger packet's body is read
// past the buffer, straight into the packet.
const (
	DefaultMaxPacketSize   = 264 << 10
	DefaultWritesPending   = 16
	DefaultReadBufferSize  = 128
	DefaultWriteBufferSize = 1024
	DefaultMaxInflight     = 1024
	DefaultPublishRate     = 50
	DefaultPublishBurst    = 100
	DefaultAnswerRate      = 200
	DefaultAnswerBurst     = 200
	DefaultSubscribeRate   = 1
	DefaultSubscribeBurst  = 10
)

// MaxSubscriptions is how many topic filters one connection may hold;
// SUBSCRIBE is refused for the rest (SUBACK 0x80, v5 0x97 quota
// exceeded). The protocol needs three at most (msg, property/desired,
// property/report/reply, or one ".../#"), and every filter held costs
// broker memory that a device must not be able to grow without bound.
const MaxSubscriptions = 16

// Config holds the listeners and limits of the broker.
type Config struct {
	// TCPAddr, TLSAddr and WSAddr are listen addresses; "" disables one.
	TCPAddr, TLSAddr, WSAddr string
	// Bound holds the listeners Listen bound for these addresses; nil:
	// Start binds them itself.
	Bound map[string]net.Listener
	// TLSConfig serves the TLS listener; required when TLSAddr is set.
	TLSConfig *tls.Config
	// MaxPacketSize caps one MQTT packet in bytes, so that no device can
	// make the broker buffer more. A larger packet closes the connection.
	MaxPacketSize uint32
	// WritesPending bounds each connection's queue of outgoing packets.
	// mochi's default (8192) reserves 64 KiB per connection up front.
	WritesPending int32
	// ReadBufferSize and WriteBufferSize size each connection's buffers.
	ReadBufferSize, WriteBufferSize int
	// PublishRate and PublishBurst limit the PUBLISHes of one device per
	// second (token bucket); what exceeds them is refused like a publish
	// the handler refuses with ErrQuota, so one device cannot monopolise
	// the store.
	PublishRate  float64
	PublishBurst int
	// AnswerTopics are the topics under a device's prefix on which it
	// answers what the service asked it (a command's reply): their
	// publishes are limited by AnswerRate and AnswerBurst instead of the
	// publish rate. The service bounds what it asks a device (its open
	// commands), so a device may answer as fast as it is asked, and a
	// reconnect that hands it its whole backlog at once is answered at
	// once, without taking the place of its other publishes. The
	// defaults, 200/s in bursts of 200, hold a backlog of 100 twice over
	// and bound what a device flooding replies that answer nothing (each
	// a lookup) costs.
	AnswerTopics []string
	AnswerRate   float64
	AnswerBurst  int
	// SubscribeRate and SubscribeBurst limit the SUBSCRIBEs of one device
	// per second (token bucket); every filter of a SUBSCRIBE beyond them
	// is refused. A SUBSCRIBE makes the service read the device's queue.
	SubscribeRate  float64
	SubscribeBurst int
	// SourceLoginLimit and IdentityLoginLimit throttle failed logins (see
	// throttle.go): per device identity from one source, and per device
	// identity from everywhere.
	SourceLoginLimit, IdentityLoginLimit LoginLimit
	// ServiceTopics are the topics under a device's prefix that the
	// service publishes to; Handler.Subscribed reports SUBSCRIBEs that
	// match them, each topic a SUBSCRIBE matches once and in this order,
	// and Session.Subscribed answers for them.
	ServiceTopics []string
	// WriteTimeout bounds each write to a device (default WriteTimeout):
	// a device that stops reading loses its connection rather than hold
	// the caller of a delivery or a property push.
	WriteTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.WriteTimeout == 0 {
		c.WriteTimeout = WriteTimeout
	}
	if c.MaxPacketSize == 0 {
		c.MaxPacketSize = DefaultMaxPacketSize
	}
	if c.WritesPending == 0 {
		c.WritesPending = DefaultWritesPending
	}
	if c.ReadBufferSize == 0 {
		c.ReadBufferSize = DefaultReadBufferSize
	}
	if c.WriteBufferSize == 0 {
		c.WriteBufferSize = DefaultWriteBufferSize
	}
	if c.PublishRate == 0 {
		c.PublishRate, c.PublishBurst = DefaultPublishRate, DefaultPublishBurst
	}
	if c.AnswerRate == 0 {
		c.AnswerRate, c.AnswerBurst = DefaultAnswerRate, DefaultAnswerBurst
	}
	if c.SubscribeRate == 0 {
		c.SubscribeRate, c.SubscribeBurst = DefaultSubscribeRate, DefaultSubscribeBurst
	}
	if c.SourceLoginLimit.Every == 0 {
		c.SourceLoginLimit = DefaultSourceLoginLimit
	}
	if c.IdentityLoginLimit.Every == 0 {
		c.IdentityLoginLimit = DefaultIdentityLoginLimit
	}
}

// ErrNotAuthorized is what Handler.Authenticate returns to refuse a
// device; the device gets CONNACK "not authorized".
var ErrNotAuthorized = errors.New("not authorized")

// Errors Handler.Published returns to refuse a publish, wrapped or not;
// they tell an MQTT 5 device why.
var (
	// ErrQuota: the device is over a limit (v5 PUBACK 0x97, quota exceeded).
	ErrQuota = errors.New("quota exceeded")
	// ErrMalformed: the publish breaks the rules of its topic (v5 PUBACK
	// 0x99, payload format invalid).
	ErrMalformed = errors.New("payload format invalid")
	// ErrTopic: the device publishes to a topic under its prefix that the
	// service takes nothing on (v5 PUBACK 0x90, topic name invalid).
	ErrTopic = errors.New("topic name invalid")
)

// Handler receives device events. The broker calls it from each
// connection's own goroutine, so a slow call delays only that device.
type Handler interface {
	// Authenticate checks a device's credentials; an error refuses the
	// connection with CONNACK "not authorized".
	Authenticate(appKey, deviceName, secret string) error
	// Connected reports a session that has been accepted. An older
	// session of the same device has been or is being disconnected.
	Connected(s *Session)
	// Disconnected reports the end of a session. Under takeover it may
	// arrive after the newer session's Connected; s.Current tells.
	Disconnected(s *Session)
	// Subscribed reports a SUBSCRIBE granted for a filter that matches
	// the service topic (relative to the device's prefix).
	Subscribed(s *Session, topic string)
	// Unsubscribed reports that an UNSUBSCRIBE left no subscription
	// matching the service topic.
	Unsubscribed(s *Session, topic string)
	// Published reports a PUBLISH from the device; topic is relative to
	// the device's prefix. Nothing a device publishes reaches any other
	// client. It is called from the connection's read loop, and a QoS 1
	// publish is acknowledged only once it has returned nil: the handler
	// may block until what the publish asks for is done. An error refuses
	// the publish: an MQTT 5 QoS 1 publish gets a PUBACK with reason 0x97
	// (ErrQuota), 0x99 (ErrMalformed), 0x90 (ErrTopic) or 0x80 (any other
	// error); an MQTT
	// 3.1.1 or QoS 0 one gets no PUBACK. The connection stays open.
	Published(s *Session, topic string, qos byte, payload []byte) error
	// Acked reports the device's PUBACK of a packet sent with
	// Session.Publish.
	Acked(s *Session, packetID uint16)
}

// CorrelatedHandler is a Handler that also takes the MQTT 5 Correlation
// Data of what devices publish: the broker calls PublishedCorrelated in
// place of Published, with correlation nil when the publish carries none.
type CorrelatedHandler interface {
	PublishedCorrelated(s *Session, topic string, qos byte, payload, correlation []byte) error
}

// Broker is the embedded MQTT broker.
type Broker struct {
	cfg     Config
	handler Handler
	log     *slog.Logger
	server  *mqtt.Server
	// nextConn numbers the connections, for the client ids mochi sees
	// and as their sessions' IDs.
	nextConn atomic.Uint64

	mu       sync.Mutex
	sessions map[*mqtt.Client]*Session // by connection
	devices  map[string]*Session       // the current session by "app/device"

	// order serialises the sessions of one device as they establish
	// (hook.OnSessionEstablished); a device hashes to one of them.
	order [256]sync.Mutex

	connected atomic.Int64
	// Topic filters refused: outside the device's topics, over
	// MaxSubscriptions, over the subscribe rate.
	subRefusedTopic, subRefusedLimit, subRefusedRate atomic.Int64
	throttled                                        atomic.Int64 // logins refused over a failure budget
	// Publishes refused: over the publish rate, and by the handler.
	refusedRate, refusedQuota, refusedMalformed, refusedTopic, refusedFailed atomic.Int64

	logins *loginThrottle
	// refusals logs refused publishes, rate-limited.
	refusals *refusalLog

	listeners []net.Listener // ours, closed first by Close
}

// ConnectTimeout is how long a new connection may take to send CONNECT.
// mochi waits forever, so a silent connection would hold its goroutine
// and, at shutdown, Close.
const ConnectTimeout = 10 * time.Second

// connectDeadline gives every accepted connection ConnectTimeout to
// connect; mochi replaces the read deadline with the keepalive's after
// CONNECT, and sets the write deadline ahead of each write
// (Config.WriteTimeout, patch 7 in third_party/mochi-mqtt/PATCHES.md).
type connectDeadline struct{ net.Listener }

func (l connectDeadline) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(ConnectTimeout))
	}
	return c, err
}

// New builds a broker; Start opens its listeners.
func New(cfg Config, h Handler, log *slog.Logger) *Broker {
	cfg.setDefaults()
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = cfg.MaxPacketSize
	caps.MaximumClientWritesPending = cfg.WritesPending
	caps.MaximumInflight = DefaultMaxInflight
	caps.ReceiveMaximum = DefaultMaxInflight
	// The service keeps its own durable queue; broker-side sessions would
	// only hold memory for devices that are gone.
	caps.MaximumSessionExpiryInterval = 0
	caps.MaximumMessageExpiryInterval = 0
	caps.RetainAvailable = 0
	caps.SharedSubAvailable = 0
	caps.MaximumQos = 1
	// No topic aliases: the CONNACK announces none, so a PUBLISH with one
	// is refused (DISCONNECT 0x94) rather than taken against mochi's
	// unannounced default of 65,535, each alias a topic held in memory.
	caps.TopicAliasMaximum = 0
	b := &Broker{
		cfg:      cfg,
		handler:  h,
		log:      log,
		sessions: make(map[*mqtt.Client]*Session),
		devices:  make(map[string]*Session),
		logins:   newLoginThrottle(cfg.SourceLoginLimit, cfg.IdentityLoginLimit),
		refusals: newRefusalLog(log),
	}
	b.server = mqtt.New(&mqtt.Options{
		Capabilities:             caps,
		ClientNetWriteBufferSize: cfg.WriteBufferSize,
		ClientNetReadBufferSize:  cfg.ReadBufferSize,
		WriteTimeout:             cfg.WriteTimeout,
		Logger:                   slog.New(demoteWarnings{log.Handler()}).With("component", "mqtt"),
		SysTopicResendInterval:   1 << 30, // no $SYS topics: devices may not read them anyway
	})
	return b
}

// Listen binds the configured addresses ("" skipped) and returns the
// listeners by id ("tcp", "tls", "ws"), for Config.Bound. Binding before
// anything else starts lets a busy port fail a start before it has done
// anything. On an error nothing stays bound.
func Listen(cfg Config) (map[string]net.Listener, error) {
	bound := map[string]net.Listener{}
	for _, l := range []struct{ id, addr string }{{"tcp", cfg.TCPAddr}, {"tls", cfg.TLSAddr}, {"ws", cfg.WSAddr}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			closeAll(bound)
			return nil, fmt.Errorf("listen mqtt %s %s: %w", l.id, l.addr, err)
		}
		bound[l.id] = ln
	}
	return bound, nil
}

func closeAll(lns map[string]net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

// Start serves in the background on Config.Bound, or on the configured
// addresses, bound now. It returns the bound addresses by listener id.
func (b *Broker) Start() (map[string]string, error) {
	bound := b.cfg.Bound
	if bound == nil {
		var err error
		if bound, err = Listen(b.cfg); err != nil {
			return nil, err
		}
	}
	if err := b.server.AddHook(&hook{b: b}, nil); err != nil {
		closeAll(bound)
		return nil, fmt.Errorf("mqtt hook: %w", err)
	}
	addrs := map[string]string{}
	add := func(id string, wrap func(net.Listener) (listeners.Listener, error)) error {
		raw := bound[id]
		if raw == nil {
			return nil
		}
		b.listeners = append(b.listeners, raw)
		ln := connectDeadline{raw}
		l, err := wrap(ln)
		if err != nil {
			return err
		}
		if err := b.server.AddListener(l); err != nil {
			return fmt.Errorf("mqtt listener %s: %w", id, err)
		}
		addrs[id] = ln.Addr().String()
		return nil
	}
	err := add("tcp", func(ln net.Listener) (listeners.Listener, error) {
		return listeners.NewNet("tcp", ln), nil
	})
	if err == nil {
		err = add("tls", func(ln net.Listener) (listeners.Listener, error) {
			if b.cfg.TLSConfig == nil {
				return nil, errors.New("mqtt tls listener needs a certificate")
			}
			return listeners.NewNet("tls", tls.NewListener(ln, b.cfg.TLSConfig)), nil
		})
	}
	if err == nil {
		err = add("ws", func(ln net.Listener) (listeners.Listener, error) {
			return newWebsocket("ws", ln), nil
		})
	}
	if err != nil {
		closeAll(bound)
		b.server.Close()
		return nil, err
	}
	if err := b.server.Serve(); err != nil {
		closeAll(bound)
		b.server.Close()
		return nil, fmt.Errorf("serve mqtt: %w", err)
	}
	return addrs, nil
}

// Close stops the listeners and disconnects every device, waiting for
// their Disconnected calls.
func (b *Broker) Close() error {
	// mochi's Close can deadlock while clients are disconnecting
	// (Clients.GetByListener read-locks twice, and a disconnecting
	// client's write lock slips between: upstream bug report
	// https://github.com/mochi-mqtt/server/issues/488). So stop new
	// connections, end every client and wait for them first: then Close
	// finds no clients left.
	for _, ln := range b.listeners {
		_ = ln.Close()
	}
	for _, cl := range b.server.Clients.GetAll() {
		b.disconnect(cl, packets.ErrServerShuttingDown)
	}
	b.server.Listeners.ClientsWg.Wait()
	return b.server.Close()
}

// Connected returns how many device sessions are live.
func (b *Broker) Connected() int64 { return b.connected.Load() }

// PublishRefusals counts the device publishes refused, by why.
type PublishRefusals struct {
	// RateLimit: over the device's publish rate (Config.PublishRate).
	RateLimit int64
	// Quota, Malformed, Topic and Failed: refused by Handler.Published
	// with ErrQuota, ErrMalformed, ErrTopic or any other error.
	Quota, Malformed, Topic, Failed int64
}

// PublishesRefused returns how many device publishes were refused.
func (b *Broker) PublishesRefused() PublishRefusals {
	return PublishRefusals{RateLimit: b.refusedRate.Load(), Quota: b.refusedQuota.Load(),
		Malformed: b.refusedMalformed.Load(), Topic: b.refusedTopic.Load(), Failed: b.refusedFailed.Load()}
}

// LoginsThrottled returns how many logins were refused, unchecked, because
// too many had failed before them (see throttle.go).
func (b *Broker) LoginsThrottled() int64 { return b.throttled.Load() }

// SubscriptionRefusals counts the topic filters refused, by why.
type SubscriptionRefusals struct {
	// Topic: a filter outside the device's own topics. Limit: over
	// MaxSubscriptions. Rate: over the subscribe rate.
	Topic, Limit, Rate int64
}

// SubscriptionsRefused returns how many topic filters were refused.
func (b *Broker) SubscriptionsRefused() SubscriptionRefusals {
	return SubscriptionRefusals{Topic: b.subRefusedTopic.Load(), Limit: b.subRefusedLimit.Load(), Rate: b.subRefusedRate.Load()}
}

// Kick disconnects the device's current session, if any, telling it
// "not authorized" (MQTT 5) before closing. It reports whether one was
// connected.
func (b *Broker) Kick(appKey, deviceName string) bool {
	b.mu.Lock()
	s := b.devices[deviceKey(appKey, deviceName)]
	b.mu.Unlock()
	if s == nil {
		return false
	}
	s.kicked.Store(true)
	b.disconnect(s.cl, packets.ErrNotAuthorized)
	return true
}

// disconnect ends a client's connection, telling an MQTT 5 client why.
// MQTT 3.1.1 has no DISCONNECT from the server (clients report one as a
// protocol error), so those connections are simply closed.
func (b *Broker) disconnect(cl *mqtt.Client, code packets.Code) {
	if cl.Properties.ProtocolVersion >= 5 {
		_ = b.server.DisconnectClient(cl, code)
		return
	}
	cl.Stop(code)
}

// Session returns the device's current session, or nil.
func (b *Broker) Session(appKey, deviceName string) *Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.devices[deviceKey(appKey, deviceName)]
}

// Sessions returns every current session.
func (b *Broker) Sessions() []*Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Session, 0, len(b.devices))
	for _, s := range b.devices {
		out = append(out, s)
	}
	return out
}

func deviceKey(appKey, deviceName string) string { return appKey + "/" + deviceName }

// establishing returns the mutex that orders the sessions of the device
// with key k.
func (b *Broker) establishing(k string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(k))
	return &b.order[h.Sum32()%uint32(len(b.order))]
}

// parseUsername splits "{app_key}/{device_name}". Device names cannot
// hold "/", so the last one separates the two.
func parseUsername(u string) (appKey, device string, ok bool) {
	i := strings.LastIndexByte(u, '/')
	if i <= 0 || i == len(u)-1 {
		return "", "", false
	}
	return u[:i], u[i+1:], true
}

// demoteWarnings logs mochi's warnings at debug level: it warns about
// every connection that ends with an error (a device losing its network,
// a takeover, a shutdown), which at fleet scale buries what matters.
type demoteWarnings struct{ slog.Handler }

func (h demoteWarnings) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelWarn {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

func (h demoteWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h demoteWarnings) WithAttrs(as []slog.Attr) slog.Handler {
	return demoteWarnings{h.Handler.WithAttrs(as)}
}

func (h demoteWarnings) WithGroup(name string) slog.Handler {
	return demoteWarnings{h.Handler.WithGroup(name)}
}
