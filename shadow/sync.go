package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

// Topics under a device's prefix (docs/device-protocol.md, "Topics").
const (
	TopicDesired     = "property/desired"
	TopicGet         = "property/get"
	TopicReport      = "property/report"
	TopicReportReply = "property/report/reply"
)

// Report reply codes beyond the operation codes: a payload that is not a
// valid report, and a failure of the service.
const (
	CodeBadPayload = 1003
	CodeInternal   = 1000
)

// MaxReportProperties bounds one report, like a property set.
const MaxReportProperties = 100

// Publisher sends to one connected device; the broker's session is one.
// PublishControl publishes at QoS 1, within the window of publishes the
// device takes unacknowledged (its MQTT 5 Receive Maximum).
type Publisher interface {
	PublishControl(topic string, payload []byte) error
	Subscribed(topic string) bool
}

// SyncStore is what Sync needs of the store.
type SyncStore interface {
	GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error)
	ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error)
	Barrier(ctx context.Context) error
}

var _ SyncStore = store.Store(nil)

// Sync keeps connected devices and their shadows in step: it sends the
// desired document and applies reports.
type Sync struct {
	store SyncStore
	log   *slog.Logger
	now   func() time.Time
}

// NewSync returns a Sync on st.
func NewSync(st SyncStore, log *slog.Logger) *Sync {
	return &Sync{store: st, log: log, now: time.Now}
}

// desiredDoc is the payload on property/desired.
type desiredDoc struct {
	Version    int64                      `json:"version"`
	Properties map[string]json.RawMessage `json:"properties"`
	Time       int64                      `json:"time"`
}

// DesiredDocument is the desired document of sh: every desired value,
// the version of the property set that produced it (0 before any) and
// that set's time in Unix milliseconds.
func DesiredDocument(sh store.Shadow) []byte {
	doc := desiredDoc{Version: sh.LastDesiredVersion - 1, Properties: map[string]json.RawMessage{}, Time: sh.LastDesiredSTime}
	for name, p := range sh.Properties {
		if p.DesiredValue != nil {
			doc.Properties[name] = p.DesiredValue
		}
	}
	b, _ := json.Marshal(doc) // raw values were validated JSON when stored
	return b
}

// SendDesired publishes the device's desired document, as stored now,
// to p. With onlyIfSet it sends nothing while no property was ever set
// (on SUBSCRIBE); a property/get always gets an answer.
func (s *Sync) SendDesired(ctx context.Context, p Publisher, appKey, device string, onlyIfSet bool) {
	sh, err := s.load(ctx, appKey, device)
	if err != nil {
		s.log.Error("load shadow", "app", appKey, "device", device, "err", err)
		return
	}
	if onlyIfSet && sh.LastDesiredVersion <= 1 {
		return
	}
	s.Push(p, sh)
}

// load reads the device's shadow for the device to see: only once what
// it reads is durable, so a crash cannot take back a desired version the
// device has acted on (store.Store.Barrier).
func (s *Sync) load(ctx context.Context, appKey, device string) (store.Shadow, error) {
	sh, err := s.store.GetShadow(ctx, appKey, device)
	if err != nil {
		return sh, err
	}
	if err := s.store.Barrier(ctx); err != nil {
		return store.Shadow{}, err
	}
	return sh, nil
}

// Push publishes sh's desired document to p if the device subscribed to it.
func (s *Sync) Push(p Publisher, sh store.Shadow) {
	if !p.Subscribed(TopicDesired) {
		return
	}
	if err := p.PublishControl(TopicDesired, DesiredDocument(sh)); err != nil {
		s.log.Debug("publish desired", "err", err)
	}
}

// reportMsg is the payload on property/report.
type reportMsg struct {
	Version    *int64                     `json:"version"`
	Properties map[string]json.RawMessage `json:"properties"`
	SDKVer     *string                    `json:"sdk_ver"`
	AppVer     *string                    `json:"app_ver"`
}

// ReportReply is the payload on property/report/reply.
type ReportReply struct {
	Version int64  `json:"version"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Report applies a device's property report and answers on
// property/report/reply when the device subscribed to it.
func (s *Sync) Report(ctx context.Context, p Publisher, app store.App, device string, payload []byte) ReportReply {
	reply := s.report(ctx, app, device, payload)
	if p.Subscribed(TopicReportReply) {
		b, _ := json.Marshal(reply)
		if err := p.PublishControl(TopicReportReply, b); err != nil {
			s.log.Debug("publish report reply", "err", err)
		}
	}
	return reply
}

func (s *Sync) report(ctx context.Context, app store.App, device string, payload []byte) ReportReply {
	r, err := ParseReport(payload)
	if err != nil {
		return ReportReply{Version: r.Version, Code: CodeBadPayload, Message: err.Error()}
	}
	names := make([]string, 0, len(r.Properties))
	for n := range r.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	if cerr := Check(app.Properties, names, r.Properties); cerr != nil {
		return ReportReply{Version: r.Version, Code: cerr.Code, Message: CodeText(cerr.Code) + ": " + cerr.Error()}
	}
	now := s.now()
	r.AppKey, r.DeviceName, r.Time = app.Key, device, now.UnixMilli()
	r.Emit = func(sh store.Shadow) []store.Event {
		return []store.Event{reportedEvent(r, sh, now)}
	}
	sh, err := s.store.ReportProperties(ctx, r)
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		last := int64(0)
		if cur, gerr := s.load(ctx, app.Key, device); gerr == nil {
			last = cur.LastReportedVersion
		}
		return ReportReply{Version: r.Version, Code: CodeVersionInvalid, Message: fmt.Sprintf("version invalid: %d is not above last_reported_version %d", r.Version, last)}
	case errors.Is(err, store.ErrFull):
		// Not logged per report: the store logs its state, rate-limited.
		s.log.Debug("store report: storage full", "app", app.Key, "device", device, "err", err)
		return ReportReply{Version: r.Version, Code: CodeInternal, Message: "storage full; report again later"}
	case err != nil:
		s.log.Error("store report", "app", app.Key, "device", device, "err", err)
		return ReportReply{Version: r.Version, Code: CodeInternal, Message: "internal error; report again later"}
	}
	return ReportReply{Version: sh.LastReportedVersion, Code: CodeOK, Message: CodeText(CodeOK)}
}

// reportedEvent is the property.reported of report r, accepted at now,
// which left the shadow sh: the report's version (assigned by the store
// when the device sent none), the properties it reported and the
// shadow's versions.
func reportedEvent(r store.Report, sh store.Shadow, now time.Time) store.Event {
	return events.New(events.TypeReported, r.AppKey, r.DeviceName, now, events.Reported{
		Version: sh.LastReportedVersion, Properties: r.Properties, SDKVer: sh.SDKVer, AppVer: sh.AppVer})
}

// ParseReport checks a report payload: a JSON object with a
// properties object of 1 to MaxReportProperties number or string
// values, an optional positive integer version and optional sdk_ver and
// app_ver strings of at most 64 bytes. The Report it returns carries the
// version even when another field is wrong, for the reply.
func ParseReport(payload []byte) (store.Report, error) {
	var r store.Report
	var m reportMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		return r, errors.New("payload must be a JSON object with version, properties, sdk_ver and app_ver")
	}
	if m.Version != nil {
		if *m.Version < 1 {
			return r, fmt.Errorf("version must be a positive integer, got %d", *m.Version)
		}
		r.Version = *m.Version
	}
	if len(m.Properties) == 0 || len(m.Properties) > MaxReportProperties {
		return r, fmt.Errorf("properties must be an object of 1 to %d properties", MaxReportProperties)
	}
	for name, v := range m.Properties {
		if err := ValidateName(name); err != nil {
			return r, fmt.Errorf("property name: %w", err)
		}
		if !IsNumberOrString(v) {
			return r, fmt.Errorf("property %q: value must be a number or a string", name)
		}
	}
	for field, v := range map[string]*string{"sdk_ver": m.SDKVer, "app_ver": m.AppVer} {
		if v != nil && len(*v) > MaxVersionLen {
			return r, fmt.Errorf("%s must be at most %d bytes", field, MaxVersionLen)
		}
	}
	r.Properties = make(map[string]json.RawMessage, len(m.Properties))
	for name, v := range m.Properties {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return r, fmt.Errorf("property %q: %w", name, err)
		}
		r.Properties[name] = buf.Bytes()
	}
	if m.SDKVer != nil {
		r.SDKVer = *m.SDKVer
	}
	if m.AppVer != nil {
		r.AppVer = *m.AppVer
	}
	return r, nil
}

// MaxVersionLen bounds sdk_ver and app_ver.
const MaxVersionLen = 64

// IsNumberOrString reports whether v is a JSON number or string, the only
// property values there are.
func IsNumberOrString(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	if v[0] == '"' {
		var s string
		return json.Unmarshal(v, &s) == nil
	}
	var n json.Number
	return (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Unmarshal(v, &n) == nil
}
