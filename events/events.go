package events

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/devmsg/devmsg/store"
)

// Event types (docs/events.md, "Event types").
const (
	TypeUp       = "device.up"
	TypeEvent    = "device.event"
	TypeOnline   = "device.online"
	TypeOffline  = "device.offline"
	TypeReported = "property.reported"
	TypeCreated  = "device.created"
	TypeDeleted  = "device.deleted"
	TypeEnabled  = "device.enabled"
	TypeDisabled = "device.disabled"
	// TypeCommandProgress and TypeCommandDone are made by the command
	// domain (package command).
	TypeCommandProgress = "command.progress"
	TypeCommandDone     = "command.done"
	// TypeJobDone is made by the job domain (package job) as a job ends.
	TypeJobDone = "job.done"
)

// Types lists every event type, in the order the docs give them.
var Types = []string{TypeUp, TypeEvent, TypeOnline, TypeOffline, TypeReported,
	TypeCreated, TypeDeleted, TypeEnabled, TypeDisabled, TypeCommandProgress, TypeCommandDone, TypeJobDone}

// KnownType reports whether t is an event type.
func KnownType(t string) bool {
	for _, k := range Types {
		if k == t {
			return true
		}
	}
	return false
}

// Offline reasons of device.offline.
const (
	ReasonDisconnect = "disconnect"
	ReasonKeepalive  = "keepalive"
	ReasonTakeover   = "takeover"
	ReasonKicked     = "kicked"
	ReasonNodeLost   = "node_lost"
	ReasonError      = "error"
)

// Up is the data of device.up.
type Up struct {
	Topic    string `json:"topic"`
	QoS      byte   `json:"qos"`
	Payload  string `json:"payload"`
	Encoding string `json:"encoding"` // "utf8" or "base64"
}

// Report is the data of device.event: a device's event report. ReportSeq
// is not stored: it is the event's id, which increases per device.
type Report struct {
	Name      string `json:"name"`
	Content   string `json:"content"`
	Type      int    `json:"type"`
	Time      int64  `json:"time"`
	ReportSeq int64  `json:"report_seq,omitempty"`
}

// Online is the data of device.online.
type Online struct {
	ClientIP  string `json:"client_ip"`
	Protocol  string `json:"protocol"`  // "3.1.1" or "5"
	Transport string `json:"transport"` // "tcp", "tls" or "ws"
}

// Offline is the data of device.offline.
type Offline struct {
	ClientIP string `json:"client_ip"`
	Reason   string `json:"reason"`
	OnlineMS int64  `json:"online_ms"`
}

// Reported is the data of property.reported.
type Reported struct {
	Version    int64                      `json:"version"`
	Properties map[string]json.RawMessage `json:"properties"`
	SDKVer     string                     `json:"sdk_ver"`
	AppVer     string                     `json:"app_ver"`
}

// New returns an event of the type for the device at t, with data
// marshalled (nil data is {}). The store assigns its id.
func New(typ, appKey, device string, t time.Time, data any) store.Event {
	raw := json.RawMessage("{}")
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			panic("events: data does not marshal: " + err.Error())
		}
		raw = b
	}
	return store.Event{Type: typ, AppKey: appKey, DeviceName: device, Time: t.UnixMilli(), Data: raw}
}

// UpData returns the data of a device.up for a publish to topic (relative
// to the device's prefix, "up" or "up/...").
func UpData(topic string, qos byte, payload []byte) Up {
	if utf8.Valid(payload) {
		return Up{Topic: topic, QoS: qos, Payload: string(payload), Encoding: "utf8"}
	}
	return Up{Topic: topic, QoS: qos, Payload: base64.StdEncoding.EncodeToString(payload), Encoding: "base64"}
}

// Wire is the one JSON shape of an event, as pull, webhooks, the console
// and `devmsg events` show it.
type Wire struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	AppKey     string          `json:"app_key"`
	DeviceName string          `json:"device_name"`
	Time       int64           `json:"time"`
	Data       json.RawMessage `json:"data"`
}

// ToWire returns e in its JSON shape: the id as a decimal string, and a
// device.event's report_seq filled in from the id.
func ToWire(e store.Event) Wire {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if e.Type == TypeEvent {
		var r Report
		if json.Unmarshal(data, &r) == nil {
			r.ReportSeq = e.ID
			if b, err := json.Marshal(r); err == nil {
				data = b
			}
		}
	}
	return Wire{ID: strconv.FormatInt(e.ID, 10), Type: e.Type, AppKey: e.AppKey,
		DeviceName: e.DeviceName, Time: e.Time, Data: data}
}

// ToWires converts a slice with ToWire (never nil, so it renders as []).
func ToWires(evs []store.Event) []Wire {
	out := make([]Wire, 0, len(evs))
	for _, e := range evs {
		out = append(out, ToWire(e))
	}
	return out
}

// JIOT is the body of a webhook with format "jiot": the source API's
// event callback, for device.event only.
type JIOT struct {
	ProductKey string    `json:"product_key"`
	ReportSeq  int64     `json:"report_seq"`
	DeviceName string    `json:"device_name"`
	Event      JIOTEvent `json:"event"`
}

// JIOTEvent is the event object of a JIOT body.
type JIOTEvent struct {
	Name    string `json:"name"`
	Content string `json:"content"`
	Time    int64  `json:"time"`
	Type    int    `json:"type"`
}

// ToJIOT returns the jiot body of a device.event; ok is false for any
// other type.
func ToJIOT(e store.Event) (JIOT, bool) {
	if e.Type != TypeEvent {
		return JIOT{}, false
	}
	var r Report
	if json.Unmarshal(e.Data, &r) != nil {
		return JIOT{}, false
	}
	return JIOT{ProductKey: e.AppKey, ReportSeq: e.ID, DeviceName: e.DeviceName,
		Event: JIOTEvent{Name: r.Name, Content: r.Content, Time: r.Time, Type: r.Type}}, true
}
