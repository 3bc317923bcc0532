package device

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ErrNotAuthorized means the service refused the credentials: a wrong
// secret, an unknown device or a disabled one.
var ErrNotAuthorized = errors.New("device: not authorized")

// Config describes a device and how it reaches the service.
type Config struct {
	// Broker is the service's MQTT address: tcp://host:1883,
	// ssl://host:8883 or ws://host:8083/mqtt.
	Broker       string
	AppKey       string
	DeviceName   string
	DeviceSecret string
	// TLSConfig is used for ssl:// and wss:// brokers.
	TLSConfig *tls.Config
	// SDKVersion and AppVersion go with every report (sdk_ver, app_ver).
	SDKVersion, AppVersion string
	// OnMessage receives each message; it is acknowledged when the call
	// returns. OnDesired receives each desired document. Both run on one
	// goroutine of the Device's own, in arrival order, and may call
	// Report, GetDesired and Click.
	OnMessage func(Message)
	OnDesired func(Desired)
	// OnConnectionLost is told when the connection drops; the device
	// reconnects by itself.
	OnConnectionLost func(error)
	// KeepAlive defaults to 60 s.
	KeepAlive time.Duration
	// ProtocolVersion is 4 for MQTT 3.1.1 (the default) or 5 for MQTT 5.
	// The service serves both alike; with MQTT 5 a command's answer goes
	// to the Response Topic the service names, with its Correlation Data.
	ProtocolVersion byte

	commands map[string]CommandHandler // see OnCommand
}

// Message is a message from the service (topic msg).
type Message struct {
	ID         int64
	Body       string
	SentTime   int64 // Unix seconds
	ExpireTime int64 // Unix seconds
}

// Desired is the desired-properties document (topic property/desired).
type Desired struct {
	// Version is that of the property set that produced the document,
	// 0 before any.
	Version    int64
	Properties map[string]json.RawMessage
	Time       int64 // Unix milliseconds
}

// ReportError is a report the service rejected.
type ReportError struct {
	Version int64
	Code    int // 6003 version invalid, 6007, 6008, 6009, 1003 bad payload
	Message string
}

func (e *ReportError) Error() string {
	return fmt.Sprintf("device: report refused: %d %s", e.Code, e.Message)
}

// Device is a connected device.
type Device struct {
	cfg    Config
	conn   conn
	prefix string
	// ctx ends when the Device is closed; stop ends it.
	ctx  context.Context
	stop context.CancelFunc

	reportMu sync.Mutex       // one report at a time: replies come in order
	replies  chan reportReply // the reply of the report in flight
	desired  chan Desired     // for GetDesired
	waiting  sync.Mutex       // one GetDesired at a time

	// subscribed is signalled when a (re)connect's SUBSCRIBE is
	// acknowledged; Connect waits for the first.
	subscribed chan error

	// Callbacks run from this queue on one goroutine rather than on
	// paho's: a callback that reports would otherwise wait for a reply
	// that paho cannot deliver until the callback returns.
	qmu   sync.Mutex
	queue []func()
	wake  chan struct{}

	cmds commands
}

// conn is the MQTT client under a Device: paho.mqtt.golang for MQTT
// 3.1.1 (mqtt311.go), paho.golang for MQTT 5 (mqtt5.go). Each calls
// Device.subscribe after every (re)connect and Device.route for every
// PUBLISH it receives.
type conn interface {
	// publish sends payload to topic and, at QoS 1, returns once the
	// PUBACK came (or ctx ended). corr is the MQTT 5 Correlation Data,
	// nil for none; MQTT 3.1.1 has no such thing and ignores it.
	publish(ctx context.Context, topic string, qos byte, payload, corr []byte) error
	// subscribe subscribes at QoS 1 and fails when a topic is refused.
	subscribe(ctx context.Context, topics []string) error
	// disconnect waits up to a quarter second for work in flight.
	disconnect()
}

type reportReply struct {
	Version int64  `json:"version"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Connect connects the device and subscribes to its topics. It returns
// ErrNotAuthorized when the service refuses the credentials.
func Connect(ctx context.Context, cfg Config) (*Device, error) {
	if cfg.Broker == "" || cfg.AppKey == "" || cfg.DeviceName == "" {
		return nil, errors.New("device: Broker, AppKey and DeviceName are required")
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = time.Minute
	}
	if cfg.ProtocolVersion == 0 {
		cfg.ProtocolVersion = 4
	}
	d := &Device{
		cfg:        cfg,
		prefix:     "d/" + cfg.AppKey + "/" + cfg.DeviceName + "/",
		replies:    make(chan reportReply, 1),
		desired:    make(chan Desired, 1),
		subscribed: make(chan error, 1),
		wake:       make(chan struct{}, 1),
		cmds: commands{
			running: make(map[int64]context.CancelFunc),
			answers: make(map[int64]*answered),
		},
	}
	d.ctx, d.stop = context.WithCancel(context.Background())
	go d.run()
	var err error
	switch cfg.ProtocolVersion {
	case 4:
		err = dial311(ctx, d)
	case 5:
		err = dial5(ctx, d)
	default:
		err = fmt.Errorf("device: ProtocolVersion %d: want 4 (MQTT 3.1.1) or 5", cfg.ProtocolVersion)
	}
	if err != nil {
		d.stop()
		return nil, err
	}
	// Until the SUBSCRIBE is acknowledged a report's reply could be
	// missed, so Connect returns only once the device is subscribed.
	select {
	case err := <-d.subscribed:
		if err == nil {
			return d, nil
		}
		d.Close()
		return nil, fmt.Errorf("device: subscribe: %w", err)
	case <-ctx.Done():
		d.Close()
		return nil, ctx.Err()
	}
}

// subscribe runs on every (re)connect, on a goroutine of its own: a
// fresh session has no subscriptions, and subscribing is what makes the
// service send.
func (d *Device) subscribe() {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	err := d.conn.subscribe(ctx, []string{
		d.prefix + "msg",
		d.prefix + "property/desired",
		d.prefix + "property/report/reply",
		d.prefix + "cmd",
		d.prefix + "cmd/cancel",
	})
	select {
	case d.subscribed <- err:
	default: // a reconnect nobody waits for
	}
}

// run calls the queued callbacks in order until Close.
func (d *Device) run() {
	for {
		d.qmu.Lock()
		q := d.queue
		d.queue = nil
		d.qmu.Unlock()
		for _, f := range q {
			f()
		}
		select {
		case <-d.wake:
		case <-d.ctx.Done():
			return
		}
	}
}

// enqueue schedules f on the callback goroutine.
func (d *Device) enqueue(f func()) {
	d.qmu.Lock()
	d.queue = append(d.queue, f)
	d.qmu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// route runs on the client's receiving goroutine and must not block:
// replies are handed over here, callbacks are queued, each message is
// acknowledged once its callback returned, and commands start.
func (d *Device) route(m inbound) {
	if len(m.topic) < len(d.prefix) {
		m.ack()
		return
	}
	switch m.topic[len(d.prefix):] {
	case "msg":
		var p struct {
			MsgID      string `json:"msgid"`
			Body       string `json:"msg_body"`
			SentTime   int64  `json:"sent_time"`
			ExpireTime int64  `json:"expire_time"`
		}
		if json.Unmarshal(m.payload, &p) != nil {
			m.ack() // not ours to understand; redelivering will not help
			return
		}
		id, _ := strconv.ParseInt(p.MsgID, 10, 64)
		msg := Message{ID: id, Body: p.Body, SentTime: p.SentTime, ExpireTime: p.ExpireTime}
		d.enqueue(func() {
			if d.cfg.OnMessage != nil {
				d.cfg.OnMessage(msg)
			}
			m.ack()
		})
	case "property/desired":
		var doc Desired
		var p struct {
			Version    int64                      `json:"version"`
			Properties map[string]json.RawMessage `json:"properties"`
			Time       int64                      `json:"time"`
		}
		m.ack()
		if json.Unmarshal(m.payload, &p) != nil {
			return
		}
		doc = Desired{Version: p.Version, Properties: p.Properties, Time: p.Time}
		select {
		case d.desired <- doc:
		default: // nobody is waiting in GetDesired
		}
		if d.cfg.OnDesired != nil {
			d.enqueue(func() { d.cfg.OnDesired(doc) })
		}
	case "property/report/reply":
		m.ack()
		var r reportReply
		if json.Unmarshal(m.payload, &r) != nil {
			return
		}
		select {
		case d.replies <- r:
		default: // a reply to a report whose caller gave up
		}
	case "cmd":
		d.onCommand(m)
	case "cmd/cancel":
		m.ack()
		d.onCancel(m.payload)
	default:
		m.ack()
	}
}

// Report reports property values (numbers or strings). version 0 lets
// the service assign the next version; otherwise it must be above the
// last reported one. It returns the version the service recorded, or a
// *ReportError.
func (d *Device) Report(ctx context.Context, props map[string]any, version int64) (int64, error) {
	d.reportMu.Lock()
	defer d.reportMu.Unlock()
	select {
	case <-d.replies: // drop a late reply to an abandoned report
	default:
	}
	body := map[string]any{"properties": props}
	if version != 0 {
		body["version"] = version
	}
	if d.cfg.SDKVersion != "" {
		body["sdk_ver"] = d.cfg.SDKVersion
	}
	if d.cfg.AppVersion != "" {
		body["app_ver"] = d.cfg.AppVersion
	}
	if err := d.publish(ctx, "property/report", body); err != nil {
		return 0, err
	}
	select {
	case r := <-d.replies:
		if r.Code != 0 {
			return 0, &ReportError{Version: r.Version, Code: r.Code, Message: r.Message}
		}
		return r.Version, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// GetDesired asks the service for the current desired document and
// returns it (it also goes to OnDesired).
func (d *Device) GetDesired(ctx context.Context) (Desired, error) {
	d.waiting.Lock()
	defer d.waiting.Unlock()
	select {
	case <-d.desired:
	default:
	}
	if err := d.publish(ctx, "property/get", struct{}{}); err != nil {
		return Desired{}, err
	}
	select {
	case doc := <-d.desired:
		return doc, nil
	case <-ctx.Done():
		return Desired{}, ctx.Err()
	}
}

// Click tells the service that the device's user clicked message id.
func (d *Device) Click(ctx context.Context, id int64) error {
	return d.publish(ctx, "msg/click", map[string]string{"msgid": strconv.FormatInt(id, 10)})
}

func (d *Device) publish(ctx context.Context, topic string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("device: encode %s: %w", topic, err)
	}
	if err := d.conn.publish(ctx, d.prefix+topic, 1, b, nil); err != nil {
		return fmt.Errorf("device: publish %s: %w", topic, err)
	}
	return nil
}

// Close disconnects, waiting up to a quarter second for work in flight.
// Callbacks not yet run are dropped; their messages stay unacknowledged
// and the service delivers them again on the next connection. Command
// handlers still running see their ctx end.
func (d *Device) Close() {
	d.conn.disconnect()
	d.stop()
}
