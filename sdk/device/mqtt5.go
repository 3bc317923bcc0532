package device

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
)

// conn5 is a Device's MQTT 5 client.
type conn5 struct{ cm *autopaho.ConnectionManager }

var _ conn = (*conn5)(nil)

// dial5 connects d over MQTT 5, sets d.conn, and has d subscribe on every
// connect. It returns once the first connection is up, or with the
// reason the first attempt failed: autopaho would otherwise retry a
// refused login for ever.
func dial5(ctx context.Context, d *Device) error {
	cfg := d.cfg
	u, err := url.Parse(cfg.Broker)
	if err != nil {
		return fmt.Errorf("device: broker %q: %w", cfg.Broker, err)
	}
	user := cfg.AppKey + "/" + cfg.DeviceName
	first := make(chan error, 1)
	ready := make(chan struct{}) // closed once d.conn is complete
	c := &conn5{}
	ac := autopaho.ClientConfig{
		ServerUrls: []*url.URL{u},
		TlsCfg:     cfg.TLSConfig,
		KeepAlive:  uint16(cfg.KeepAlive / time.Second),
		// The service keeps the queue; it resends what is pending on
		// every SUBSCRIBE, so a clean session loses nothing.
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         0,
		ReconnectBackoff: func(attempt int) time.Duration {
			if attempt == 0 {
				return 0
			}
			return min(time.Second<<min(attempt-1, 5), 30*time.Second)
		},
		ConnectTimeout:  10 * time.Second,
		ConnectUsername: user,
		ConnectPassword: []byte(cfg.DeviceSecret),
		OnConnectionUp: func(*autopaho.ConnectionManager, *paho.Connack) {
			select {
			case first <- nil:
			default:
			}
			go func() { <-ready; d.subscribe() }()
		},
		OnConnectError: func(err error) {
			select {
			case first <- err:
			default:
			}
		},
		OnConnectionDown: func() bool {
			if cfg.OnConnectionLost != nil {
				cfg.OnConnectionLost(errors.New("device: connection lost"))
			}
			return true
		},
		ClientConfig: paho.ClientConfig{
			ClientID: user,
			// Messages are acknowledged after OnMessage returns, which
			// runs on the Device's callback goroutine (see Device.run).
			EnableManualAcknowledgment: true,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(r paho.PublishReceived) (bool, error) {
					p := r.Packet
					m := inbound{topic: p.Topic, payload: p.Payload, ack: func() { _ = r.Client.Ack(p) }}
					if p.Properties != nil {
						m.respTopic, m.corr = p.Properties.ResponseTopic, p.Properties.CorrelationData
					}
					d.route(m)
					return true, nil
				},
			},
		},
	}
	cm, err := autopaho.NewConnection(d.ctx, ac)
	if err != nil {
		return fmt.Errorf("device: connect: %w", err)
	}
	c.cm = cm
	d.conn = c
	close(ready)
	select {
	case err = <-first:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.disconnect()
		var ce *autopaho.ConnackError
		if errors.As(err, &ce) && (ce.ReasonCode == 0x87 || ce.ReasonCode == 0x86) {
			return ErrNotAuthorized
		}
		return fmt.Errorf("device: connect: %w", err)
	}
	return nil
}

func (c *conn5) publish(ctx context.Context, topic string, qos byte, payload, corr []byte) error {
	p := &paho.Publish{Topic: topic, QoS: qos, Payload: payload}
	if corr != nil {
		p.Properties = &paho.PublishProperties{CorrelationData: corr}
	}
	_, err := c.cm.Publish(ctx, p)
	return err
}

func (c *conn5) subscribe(ctx context.Context, topics []string) error {
	s := &paho.Subscribe{}
	for _, t := range topics {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: t, QoS: 1})
	}
	ack, err := c.cm.Subscribe(ctx, s)
	if err != nil {
		return err
	}
	for i, code := range ack.Reasons {
		if code >= 0x80 && i < len(topics) {
			return fmt.Errorf("%s refused (0x%x)", topics[i], code)
		}
	}
	return nil
}

func (c *conn5) disconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	_ = c.cm.Disconnect(ctx)
}
