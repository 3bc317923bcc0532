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

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
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
	client paho.Client
	prefix string

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
	qmu       sync.Mutex
	queue     []func()
	wake      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
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
	d := &Device{
		cfg:        cfg,
		prefix:     "d/" + cfg.AppKey + "/" + cfg.DeviceName + "/",
		replies:    make(chan reportReply, 1),
		desired:    make(chan Desired, 1),
		subscribed: make(chan error, 1),
		wake:       make(chan struct{}, 1),
		closed:     make(chan struct{}),
	}
	user := cfg.AppKey + "/" + cfg.DeviceName
	opts := paho.NewClientOptions().AddBroker(cfg.Broker).
		SetClientID(user).SetUsername(user).SetPassword(cfg.DeviceSecret).
		// The service keeps the queue; it resends what is pending on
		// every SUBSCRIBE, so a clean session loses nothing.
		SetCleanSession(true).
		SetKeepAlive(cfg.KeepAlive).
		SetAutoReconnect(true).SetMaxReconnectInterval(30 * time.Second).
		SetOrderMatters(true).
		// Messages are acknowledged after OnMessage returns, which runs
		// on the Device's callback goroutine (see run).
		SetAutoAckDisabled(true).
		SetTLSConfig(cfg.TLSConfig).
		SetOnConnectHandler(func(c paho.Client) { d.subscribe(c) }).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			if cfg.OnConnectionLost != nil {
				cfg.OnConnectionLost(err)
			}
		})
	d.client = paho.NewClient(opts)
	go d.run()
	tok := d.client.Connect()
	if err := wait(ctx, tok); err != nil {
		d.closeOnce.Do(func() { close(d.closed) })
		if errors.Is(err, packets.ErrorRefusedNotAuthorised) || errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			return nil, ErrNotAuthorized
		}
		return nil, fmt.Errorf("device: connect: %w", err)
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

// subscribe runs on every (re)connect, on a goroutine of paho's own: a
// fresh session has no subscriptions, and subscribing is what makes the
// service send.
func (d *Device) subscribe(c paho.Client) {
	tok := c.SubscribeMultiple(map[string]byte{
		d.prefix + "msg":                   1,
		d.prefix + "property/desired":      1,
		d.prefix + "property/report/reply": 1,
	}, d.route)
	tok.Wait()
	err := tok.Error()
	if st, ok := tok.(*paho.SubscribeToken); ok && err == nil {
		for topic, code := range st.Result() {
			if code > 2 {
				err = fmt.Errorf("%s refused (0x%x)", topic, code)
			}
		}
	}
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
		case <-d.closed:
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

// route runs on paho's goroutine and must not block: replies are handed
// over here, callbacks are queued, and each message is acknowledged once
// its callback returned.
func (d *Device) route(_ paho.Client, m paho.Message) {
	switch m.Topic()[len(d.prefix):] {
	case "msg":
		var p struct {
			MsgID      string `json:"msgid"`
			Body       string `json:"msg_body"`
			SentTime   int64  `json:"sent_time"`
			ExpireTime int64  `json:"expire_time"`
		}
		if json.Unmarshal(m.Payload(), &p) != nil {
			m.Ack() // not ours to understand; redelivering will not help
			return
		}
		id, _ := strconv.ParseInt(p.MsgID, 10, 64)
		msg := Message{ID: id, Body: p.Body, SentTime: p.SentTime, ExpireTime: p.ExpireTime}
		d.enqueue(func() {
			if d.cfg.OnMessage != nil {
				d.cfg.OnMessage(msg)
			}
			m.Ack()
		})
	case "property/desired":
		var doc Desired
		var p struct {
			Version    int64                      `json:"version"`
			Properties map[string]json.RawMessage `json:"properties"`
			Time       int64                      `json:"time"`
		}
		m.Ack()
		if json.Unmarshal(m.Payload(), &p) != nil {
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
		m.Ack()
		var r reportReply
		if json.Unmarshal(m.Payload(), &r) != nil {
			return
		}
		select {
		case d.replies <- r:
		default: // a reply to a report whose caller gave up
		}
	default:
		m.Ack()
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
	if err := wait(ctx, d.client.Publish(d.prefix+topic, 1, false, b)); err != nil {
		return fmt.Errorf("device: publish %s: %w", topic, err)
	}
	return nil
}

// Close disconnects, waiting up to a quarter second for work in flight.
// Callbacks not yet run are dropped; their messages stay unacknowledged
// and the service delivers them again on the next connection.
func (d *Device) Close() {
	d.client.Disconnect(250)
	d.closeOnce.Do(func() { close(d.closed) })
}

func wait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
