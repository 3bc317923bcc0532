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
	// goroutine, in arrival order.
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
		cfg:     cfg,
		prefix:  "d/" + cfg.AppKey + "/" + cfg.DeviceName + "/",
		replies: make(chan reportReply, 1),
		desired: make(chan Desired, 1),
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
		SetTLSConfig(cfg.TLSConfig).
		SetOnConnectHandler(func(c paho.Client) { d.subscribe(c) }).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			if cfg.OnConnectionLost != nil {
				cfg.OnConnectionLost(err)
			}
		})
	d.client = paho.NewClient(opts)
	tok := d.client.Connect()
	if err := wait(ctx, tok); err != nil {
		if errors.Is(err, packets.ErrorRefusedNotAuthorised) || errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			return nil, ErrNotAuthorized
		}
		return nil, fmt.Errorf("device: connect: %w", err)
	}
	return d, nil
}

// subscribe runs on every (re)connect: a fresh session has no
// subscriptions, and subscribing is what makes the service send.
func (d *Device) subscribe(c paho.Client) {
	c.SubscribeMultiple(map[string]byte{
		d.prefix + "msg":                   1,
		d.prefix + "property/desired":      1,
		d.prefix + "property/report/reply": 1,
	}, d.route)
}

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
			return
		}
		id, _ := strconv.ParseInt(p.MsgID, 10, 64)
		if d.cfg.OnMessage != nil {
			d.cfg.OnMessage(Message{ID: id, Body: p.Body, SentTime: p.SentTime, ExpireTime: p.ExpireTime})
		}
	case "property/desired":
		var doc Desired
		var p struct {
			Version    int64                      `json:"version"`
			Properties map[string]json.RawMessage `json:"properties"`
			Time       int64                      `json:"time"`
		}
		if json.Unmarshal(m.Payload(), &p) != nil {
			return
		}
		doc = Desired{Version: p.Version, Properties: p.Properties, Time: p.Time}
		select {
		case d.desired <- doc:
		default: // nobody is waiting in GetDesired
		}
		if d.cfg.OnDesired != nil {
			d.cfg.OnDesired(doc)
		}
	case "property/report/reply":
		var r reportReply
		if json.Unmarshal(m.Payload(), &r) != nil {
			return
		}
		select {
		case d.replies <- r:
		default: // a reply to a report whose caller gave up
		}
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
func (d *Device) Close() { d.client.Disconnect(250) }

func wait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
