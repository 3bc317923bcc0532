package device

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of what a device publishes to the backend (docs/device-protocol.md,
// "Telemetry and event reports"). The SDK checks them before sending: the
// service refuses a publish that breaks them, and over MQTT 3.1.1 a
// refusal is only a PUBACK that never comes.
const (
	MaxPayload    = 65536 // bytes of a telemetry payload
	MaxSuffix     = 128   // bytes of the topic levels after "up/"
	MaxEventName  = 32    // bytes of an event report's name
	MaxEventNotes = 2048  // bytes of an event report's content
)

// Level is the level of an event report, as the source API's device SDKs
// have it.
type Level int

// Event report levels.
const (
	Info  Level = 0
	Alert Level = 1
	Fault Level = 2
)

// ErrNotAcknowledged means a publish got no PUBACK before the context
// ended or the Device was closed, or could not be sent (not connected, or
// the connection failed under the write). The service may or may not have
// the event: publish it again (at least once). A service that cannot store
// an event refuses it by sending no PUBACK to an MQTT 3.1.1 client such as
// this one, so give PublishUp and ReportEvent a context with a deadline.
var ErrNotAcknowledged = errors.New("device: publish not acknowledged")

// PublishUp publishes payload as telemetry to the device's topic "up"
// (suffix "") or "up/"+suffix, at QoS 0 or 1. At QoS 1 it returns once the
// service has acknowledged it, which the service does only after storing
// the event durably: a nil error means the backend will get it. At QoS 0 it
// returns once the publish is written to the connection, with no promise.
//
// A publish in flight when the connection drops is sent again once the
// Device has reconnected, and the wait goes on. An error wrapping
// ErrNotAcknowledged means no PUBACK came (see there); an invalid suffix,
// payload or QoS is an error before anything is sent.
func (d *Device) PublishUp(ctx context.Context, suffix string, payload []byte, qos byte) error {
	topic := "up"
	if suffix != "" {
		if len(suffix) > MaxSuffix || strings.ContainsAny(suffix, "+#\x00") || !utf8.ValidString(suffix) {
			return fmt.Errorf("device: telemetry suffix %q: want 1 to %d bytes of topic levels without wildcards", suffix, MaxSuffix)
		}
		topic += "/" + suffix
	}
	if len(payload) > MaxPayload {
		return fmt.Errorf("device: telemetry payload of %d bytes: at most %d", len(payload), MaxPayload)
	}
	if qos > 1 {
		return fmt.Errorf("device: telemetry qos %d: want 0 or 1", qos)
	}
	return d.publishAcked(ctx, topic, payload, qos)
}

// ReportEvent reports an event, as the source API's device SDKs do: the
// backend receives it as a device.event (and a "jiot" webhook as the
// source API's event callback). name is 1 to 32 bytes, content at most
// 2048; its time is when the service receives it. Like a QoS 1 PublishUp,
// it returns once the service has stored the report durably.
func (d *Device) ReportEvent(ctx context.Context, name, content string, level Level) error {
	switch {
	case len(name) < 1 || len(name) > MaxEventName:
		return fmt.Errorf("device: event name %q: want 1 to %d bytes", name, MaxEventName)
	case len(content) > MaxEventNotes:
		return fmt.Errorf("device: event content of %d bytes: at most %d", len(content), MaxEventNotes)
	case level < Info || level > Fault:
		return fmt.Errorf("device: event level %d: want Info, Alert or Fault", level)
	case !utf8.ValidString(name) || !utf8.ValidString(content):
		return errors.New("device: event name and content must be UTF-8")
	}
	b, err := json.Marshal(struct {
		Name    string `json:"name"`
		Content string `json:"content"`
		Type    Level  `json:"type"`
	}{name, content, level})
	if err != nil {
		return fmt.Errorf("device: encode event: %w", err)
	}
	return d.publishAcked(ctx, "event", b, 1)
}

// publishAcked publishes to the device's topic and, at QoS 1, waits for
// the PUBACK. A publish in flight when the connection drops is sent again
// by paho once it has reconnected, so the wait goes on across a reconnect.
func (d *Device) publishAcked(ctx context.Context, topic string, payload []byte, qos byte) error {
	// The wait ends with the Device too.
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(d.ctx, cancel)()
	defer cancel()
	err := d.conn.publish(ctx, d.prefix+topic, qos, payload, nil)
	switch {
	case err == nil:
		return nil
	case d.ctx.Err() != nil:
		return fmt.Errorf("device: publish %s: device closed: %w", topic, ErrNotAcknowledged)
	case ctx.Err() != nil:
		return fmt.Errorf("device: publish %s: %w (%w)", topic, ErrNotAcknowledged, ctx.Err())
	default:
		// Not connected, or the connection failed under the write: the
		// service may or may not have it, as with a lost PUBACK.
		return fmt.Errorf("device: publish %s: %w: %w", topic, ErrNotAcknowledged, err)
	}
}
