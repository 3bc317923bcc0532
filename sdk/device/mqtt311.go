package device

import (
	"context"
	"errors"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// conn311 is a Device's MQTT 3.1.1 client.
type conn311 struct {
	c     paho.Client
	route func(inbound)
}

var _ conn = (*conn311)(nil)

// dial311 connects d over MQTT 3.1.1, sets d.conn, and has d subscribe
// on every connect.
func dial311(ctx context.Context, d *Device) error {
	cfg := d.cfg
	user := cfg.AppKey + "/" + cfg.DeviceName
	c := &conn311{route: d.route}
	opts := paho.NewClientOptions().AddBroker(cfg.Broker).
		SetClientID(user).SetUsername(user).SetPassword(cfg.DeviceSecret).
		// The service keeps the queue; it resends what is pending on
		// every SUBSCRIBE, so a clean session loses nothing.
		SetCleanSession(true).
		SetKeepAlive(cfg.KeepAlive).
		SetAutoReconnect(true).SetMaxReconnectInterval(30 * time.Second).
		SetOrderMatters(true).
		// Messages are acknowledged after OnMessage returns, which runs
		// on the Device's callback goroutine (see Device.run).
		SetAutoAckDisabled(true).
		SetTLSConfig(cfg.TLSConfig).
		SetOnConnectHandler(func(paho.Client) { go d.subscribe() }).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			if cfg.OnConnectionLost != nil {
				cfg.OnConnectionLost(err)
			}
		})
	c.c = paho.NewClient(opts)
	d.conn = c // subscribe may run before this returns
	if err := waitToken(ctx, c.c.Connect()); err != nil {
		if errors.Is(err, packets.ErrorRefusedNotAuthorised) || errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			return ErrNotAuthorized
		}
		return fmt.Errorf("device: connect: %w", err)
	}
	return nil
}

func (c *conn311) publish(ctx context.Context, topic string, qos byte, payload, _ []byte) error {
	return waitToken(ctx, c.c.Publish(topic, qos, false, payload))
}

func (c *conn311) subscribe(ctx context.Context, topics []string) error {
	filters := make(map[string]byte, len(topics))
	for _, t := range topics {
		filters[t] = 1
	}
	tok := c.c.SubscribeMultiple(filters, func(_ paho.Client, m paho.Message) {
		c.route(inbound{topic: m.Topic(), payload: m.Payload(), ack: m.Ack})
	})
	if err := waitToken(ctx, tok); err != nil {
		return err
	}
	if st, ok := tok.(*paho.SubscribeToken); ok {
		for topic, code := range st.Result() {
			if code > 2 {
				return fmt.Errorf("%s refused (0x%x)", topic, code)
			}
		}
	}
	return nil
}

func (c *conn311) disconnect() { c.c.Disconnect(250) }

func waitToken(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}
