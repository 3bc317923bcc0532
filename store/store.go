package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// Sentinel errors returned by every Store implementation. Callers check
// them with errors.Is; backends may wrap them with context.
var (
	// ErrNotFound means the app, device, message or entry does not exist
	// (or belongs to another app, which callers must not be able to tell).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists means a create found the key already present.
	ErrAlreadyExists = errors.New("already exists")
	// ErrVersionConflict means a desired-property update named a version
	// other than the device's LastDesiredVersion.
	ErrVersionConflict = errors.New("version conflict")
	// ErrSeqUsed means the app's seq_no is already recorded and unexpired.
	ErrSeqUsed = errors.New("seq_no already used")
	// ErrQueueFull means the device already has MaxPending pending messages.
	ErrQueueFull = errors.New("device queue full")
	// ErrFenced means a write was refused, and nothing written, because
	// this process cannot show that it still holds the claim its writes
	// are fenced with (in cluster mode: its node_id; see package cluster).
	ErrFenced = errors.New("fenced: this node does not hold its node_id")
	// ErrFull means a write was refused, and nothing written, because the
	// store's storage is full: the embedded store's disk is under its
	// free-space floor, or Redis refuses writes (maxmemory, or a failed
	// save). Reads go on; writes succeed again once space returns.
	ErrFull = errors.New("store full")
)

// AllNodes makes ResetPresence reset the devices of every node.
const AllNodes = -1

// MaxPending is the most undelivered messages one device may hold.
const MaxPending = 1000

// Device flag values: a disabled device cannot connect, and messages sent
// to it fail (docs/api.md, "Change a device").
const (
	FlagEnabled  = 0
	FlagDisabled = 1
)

// Rate-limit categories, each limited per app on its own (docs/api.md,
// "Rate limits").
const (
	CategoryCreate   = "create"
	CategoryProperty = "property"
	CategoryMessage  = "message"
	CategoryQuery    = "query"
)

// App is a tenant: every device, message and setting belongs to one app.
type App struct {
	Key          string `json:"key"`
	Name         string `json:"name"`
	MasterSecret string `json:"master_secret"`
	// SigningSecret signs callbacks (Standard Webhooks); never shown by the REST API.
	SigningSecret string `json:"signing_secret"`
	// RateLimits maps a category to requests per second; a missing
	// category uses the service default and 0 means unlimited.
	RateLimits map[string]int `json:"rate_limits,omitempty"`
	// Properties is the app's property model; empty means no model.
	Properties []PropertyDef `json:"properties,omitempty"`
	// Callback holds the app's message-status callback settings.
	Callback CallbackSettings `json:"callback"`
	// EventWebhooks are the app's event webhooks, at most
	// MaxEventWebhooks, in the order they were added.
	EventWebhooks []EventWebhook `json:"event_webhooks,omitempty"`
	CreatedAt     int64          `json:"created_at"` // Unix seconds
}

// MaxCallbackURLs is the most callback URLs an app may hold.
const MaxCallbackURLs = 5

// CallbackSettings are an app's callback settings (docs/callbacks.md).
type CallbackSettings struct {
	// Enabled is the switch; records made while it is off are dropped.
	Enabled bool `json:"enabled"`
	// Types are the record types to send; nil means all of 0 to 8 (an
	// empty, non-nil list sends none).
	Types []int `json:"types"`
	// URLs are the verified URLs; exactly one is the default when any
	// are present.
	URLs []CallbackURL `json:"urls,omitempty"`
}

// CallbackURL is one configured callback URL.
type CallbackURL struct {
	URL     string `json:"url"`
	Default bool   `json:"default"`
}

// Sends reports whether records of type typ are selected: all types when
// none are chosen (docs/callbacks.md, "Configure"). The callback router
// and the embedded store's outbox filter both decide by it.
func (c CallbackSettings) Sends(typ int) bool {
	return c.Types == nil || slices.Contains(c.Types, typ)
}

// Has reports whether u is one of the configured URLs.
func (c CallbackSettings) Has(u string) bool {
	for _, cu := range c.URLs {
		if cu.URL == u {
			return true
		}
	}
	return false
}

// Property types of the property model.
const (
	TypeInt    = "int"
	TypeDouble = "double"
	TypeString = "string"
)

// PropertyDef is one entry of an app's property model.
type PropertyDef struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	Min       *float64 `json:"min,omitempty"`
	Max       *float64 `json:"max,omitempty"`
	MaxLength *int     `json:"max_length,omitempty"`
}

// Device is a device's base info and presence.
type Device struct {
	AppKey     string `json:"app_key"`
	Name       string `json:"name"`
	Mark       string `json:"mark"`
	Secret     string `json:"secret"`
	Flag       int    `json:"flag"`
	TimeCreate int64  `json:"time_create"` // Unix seconds
	TimeActive int64  `json:"time_active"` // Unix seconds of first connect, 0 before

	Status         int    `json:"status"` // 0 offline, 1 online
	ClientIP       string `json:"client_ip"`
	LastLoginTime  int64  `json:"last_login_time"`  // Unix seconds, 0 = never
	LastLogoutTime int64  `json:"last_logout_time"` // Unix seconds, 0 = never
	// Node is the node_id of the node that holds (or last held) the
	// device's connection, and Conn names that connection. In cluster
	// mode they route work to the device's node and keep a stale
	// connection's logout from overwriting a newer login.
	Node int    `json:"node,omitempty"`
	Conn string `json:"conn,omitempty"`
	// Tags are the device's tags (docs/api.md, "Tags"), sorted and
	// without repeats; every backend keeps a per-app index of them
	// written with the device (see ListTagged).
	Tags []string `json:"tags,omitempty"`

	// Emit is never stored: events that CreateDevices (set on the
	// device passed in) and UpdateDevice (set by fn; cleared before each
	// call of fn) append to the event log in the same atomic write.
	Emit []Event `json:"-"`
}

// Shadow is a device's property document.
type Shadow struct {
	Properties          map[string]Property `json:"properties"`
	SDKVer              string              `json:"sdk_ver"`
	AppVer              string              `json:"app_ver"`
	LastDesiredSTime    int64               `json:"last_desired_stime"`  // Unix ms
	LastReportedSTime   int64               `json:"last_reported_stime"` // Unix ms
	LastDesiredVersion  int64               `json:"last_desired_version"`
	LastReportedVersion int64               `json:"last_reported_version"`
}

// NewShadow returns the shadow of a device that was never set or reported.
func NewShadow() Shadow {
	return Shadow{Properties: map[string]Property{}, LastDesiredVersion: 1}
}

// Property holds one property's desired and reported values as raw JSON
// (a number or a string); a nil value was never set.
type Property struct {
	DesiredValue  json.RawMessage `json:"desired_value,omitempty"`
	DesiredSTime  int64           `json:"desired_stime,omitempty"` // Unix ms
	ReportedValue json.RawMessage `json:"reported_value,omitempty"`
	ReportedSTime int64           `json:"reported_stime,omitempty"` // Unix ms
}

// DesiredUpdate is one property-set operation.
type DesiredUpdate struct {
	AppKey     string
	DeviceName string
	// Version must equal the shadow's LastDesiredVersion.
	Version    int64
	Properties map[string]json.RawMessage
	Time       int64 // Unix ms
}

// Report is one property report from a device (docs/device-protocol.md,
// "Reporting properties").
type Report struct {
	AppKey     string
	DeviceName string
	// Version must exceed the shadow's LastReportedVersion; 0 asks the
	// store to assign LastReportedVersion+1.
	Version    int64
	Properties map[string]json.RawMessage
	// SDKVer and AppVer replace the stored ones when not empty.
	SDKVer string
	AppVer string
	Time   int64 // Unix ms
	// Emit, when not nil, is called with the shadow the report leaves
	// (its LastReportedVersion is the report's version) and the events it
	// returns are appended to the event log in the same atomic write. It
	// may be called more than once (a retried optimistic write) and must
	// have no side effects; events with an empty AppKey or DeviceName get
	// the report's (so with Device.Emit and DeleteDevice's events).
	Emit func(Shadow) []Event
}

// Message states: a message is pending until it is delivered, expires,
// is retracted or fails, and never pending again (docs/api.md, "Message
// states and status records").
const (
	StatePending   = "pending"
	StateDelivered = "delivered"
	StateExpired   = "expired"
	StateRetracted = "retracted"
	StateFailed    = "failed"
)

// Message is a message sent to a device together with its status records.
type Message struct {
	ID          int64           `json:"id"`
	AppKey      string          `json:"app_key"`
	DeviceName  string          `json:"device_name"`
	Body        string          `json:"body"`
	TTL         int64           `json:"ttl"`         // seconds
	TimeCreate  int64           `json:"time_create"` // Unix seconds
	ExpireTime  int64           `json:"expire_time"` // Unix seconds
	State       string          `json:"state"`
	CallbackURL string          `json:"callback_url,omitempty"`
	Params      json.RawMessage `json:"params,omitempty"`
	Records     []Record        `json:"records"`
	// Broadcast is the id of the broadcast the message belongs to, 0
	// for none.
	Broadcast int64 `json:"broadcast,omitempty"`
}

// Callback record types (spec section 6.3).
const (
	RecordTargetValid      = 0
	RecordTargetInvalid    = 1
	RecordSubmitSuccess    = 2
	RecordSubmitFailure    = 3
	RecordDeliverySuccess  = 4
	RecordDeliveryFailure  = 5
	RecordClick            = 6
	RecordRetractSuccess   = 7
	RecordRetractionFailed = 8
)

// Record is one message-status record, in the callback format of
// docs/callbacks.md ("Record fields"). Stored records may leave out the
// fields that the message already holds (channelkey, msgid, userid,
// sender_id, params); message.Records fills them in before a record
// leaves the service.
type Record struct {
	Type       int             `json:"type"`
	ChannelKey string          `json:"channelkey,omitempty"`
	MsgID      string          `json:"msgid,omitempty"`
	UserID     string          `json:"userid,omitempty"`
	SenderID   string          `json:"sender_id,omitempty"`
	Sender     int             `json:"sender"`
	SentTime   int64           `json:"sent_time"` // Unix seconds
	Error      *RecordError    `json:"error,omitempty"`
	Params     json.RawMessage `json:"params,omitempty"`
}

// Filled returns record r of m in the callback format, with the fields
// the message holds filled in.
func (m Message) Filled(r Record) Record {
	r.ChannelKey, r.MsgID, r.UserID, r.SenderID, r.Sender, r.Params = m.AppKey, strconv.FormatInt(m.ID, 10), m.DeviceName, m.DeviceName, 0, m.Params
	return r
}

// ApplyUpdate runs an UpdateMessage fn on m, the stored message id of
// appKey, and holds it to the contract: the id, app and device stay, records
// are only appended and nothing becomes pending again. It returns how many
// records m had before and whether m leaves the pending state. Errors
// from fn come back as they are.
func ApplyUpdate(m *Message, id int64, appKey string, fn func(*Message) error) (records int, leaving bool, err error) {
	dev, before, n := m.DeviceName, m.State, len(m.Records)
	if err := fn(m); err != nil {
		return n, false, err
	}
	m.ID, m.AppKey, m.DeviceName = id, appKey, dev
	if len(m.Records) < n {
		return n, false, fmt.Errorf("update message %d: records may only be appended", id)
	}
	if m.State == StatePending && before != StatePending {
		return n, false, fmt.Errorf("update message %d: a %s message cannot become pending again", id, before)
	}
	return n, before == StatePending && m.State != StatePending, nil
}

// ApplyReport applies report r to sh, the device's stored shadow, as
// ReportProperties does: r.Version must exceed sh.LastReportedVersion (0
// takes LastReportedVersion+1), each reported property takes its value
// and r.Time, LastReportedVersion and LastReportedSTime advance, and
// SDKVer and AppVer are replaced when r's are not empty. It returns the
// version the report was given, or ErrVersionConflict with sh unchanged.
func ApplyReport(sh *Shadow, r Report) (version int64, err error) {
	if r.Version == 0 {
		r.Version = sh.LastReportedVersion + 1
	} else if r.Version <= sh.LastReportedVersion {
		return 0, ErrVersionConflict
	}
	for name, v := range r.Properties {
		p := sh.Properties[name]
		p.ReportedValue, p.ReportedSTime = v, r.Time
		sh.Properties[name] = p
	}
	sh.LastReportedVersion, sh.LastReportedSTime = r.Version, r.Time
	if r.SDKVer != "" {
		sh.SDKVer = r.SDKVer
	}
	if r.AppVer != "" {
		sh.AppVer = r.AppVer
	}
	return r.Version, nil
}

// MessageUpdate is one update of Store.UpdateMessages: Fn is applied to
// the app's message ID as UpdateMessage applies its fn.
type MessageUpdate struct {
	AppKey string
	ID     int64
	Fn     func(*Message) error
}

// RecordID is the stable id of record index (0 for the first) of message
// msgID: "<msgid>-<index>". It is the id a callback delivers the record
// with and the one GET /msg/v1/msg shows it with.
func RecordID(msgID int64, index int) string {
	return strconv.FormatInt(msgID, 10) + "-" + strconv.Itoa(index)
}

// OutboxEntry is a status record waiting for callback delivery. Every
// record a message gains is written to the outbox in the same write as
// the message, so none is lost between the two; a store may leave out
// the records that the app's CallbackSettings, as they are when the
// record is made, would have the router drop (switch off, no URL, type
// not sent).
type OutboxEntry struct {
	// Seq orders the outbox: entries written later have larger Seq.
	Seq int64 `json:"seq"`
	// ID is stable across redeliveries (RecordID), so a receiver can drop
	// duplicates.
	ID          string `json:"id"`
	AppKey      string `json:"app_key"`
	CallbackURL string `json:"callback_url,omitempty"`
	// Time is when the record was written (Unix ms), for delivery lag.
	Time   int64  `json:"time"`
	Record Record `json:"record"`
}

// OutboxRoute says where the callback worker sends an outbox entry: to
// URL, or nowhere when URL is "" (the switch is off, the type is not
// selected, or the app has no URL).
type OutboxRoute struct {
	Entry OutboxHead
	URL   string
}

// CallbackQueue names one destination's delivery queue.
type CallbackQueue struct {
	AppKey string
	URL    string
}

// DeadLetter is a batch of records whose delivery failed every retry.
type DeadLetter struct {
	ID        string        `json:"id"`
	AppKey    string        `json:"app_key"`
	URL       string        `json:"url"`
	Entries   []OutboxEntry `json:"entries"`
	Attempts  int           `json:"attempts"`
	LastError string        `json:"last_error"`
	Time      int64         `json:"time"` // Unix seconds it was dead-lettered
}

// RecordError is the error object of record types 1, 3, 5 and 8.
type RecordError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// SeqEntry is the stored outcome of a request that carried a seq_no, kept
// so that an identical retry replays it and a different one is refused.
type SeqEntry struct {
	// Fingerprint identifies the request: endpoint and canonical body.
	Fingerprint string `json:"fingerprint"`
	Status      int    `json:"status"`
	Body        []byte `json:"body"`
	// ExpiresAt is when the seq_no becomes reusable (Unix ms).
	ExpiresAt int64 `json:"expires_at"`
}

// DevicePage is one page of a device listing.
type DevicePage struct {
	Devices []Device
	// Next is the cursor of the following page, "" on the last page.
	Next string
}

// Store is the storage contract every backend implements. Every method
// that writes returns only after the write is durable (synced to disk or
// acknowledged by the replicated store). Every device and message lookup
// is scoped to an app key.
//
// What is durable. A write's method returns once the write is durable,
// but a backend may show the write to other readers earlier (Pebble
// publishes a batch before its WAL fsync completes), so a read may see
// state that a crash would take back. Nothing read may leave the process
// (to a device, a callback receiver, a webhook, a replayed response)
// until it is durable, and a caller cannot be trusted to remember that,
// so the reads whose results are handed out as they are return durable
// state only: GetSeq (a replayed response) and ReadCallbacks (callback
// deliveries) wait, before they return, until what they return is
// durable, and ReadEvents (event webhooks) shows no event before it is.
// Their callers need nothing more. The other reads are hot paths that
// also serve writes, and return what is visible; a caller that builds
// what it hands out from them (the REST API's answers from reads, the
// dispatcher's deliveries of what it read from a queue, the desired
// document sent to a device) calls Barrier, once, between its reads and
// the hand-off.
//
// Any write may fail with ErrFull while the storage is full. The embedded
// store refuses only the writes that add data (CreateApp, CreateDevices,
// SetDesired, PutSeq, CreateMessage, CreateMessages, CreateBroadcast,
// ReportProperties, AppendEvents), so that presence, deliveries and their
// records go on in the room its free-space floor keeps.
type Store interface {
	// CreateApp stores a new app; ErrAlreadyExists if the key is taken.
	CreateApp(ctx context.Context, app App) error
	// GetApp returns the app with the key, or ErrNotFound.
	GetApp(ctx context.Context, key string) (App, error)
	// ListApps returns every app ordered by key.
	ListApps(ctx context.Context) ([]App, error)
	// UpdateApp applies fn to the stored app and stores the result,
	// atomically with respect to other updates of the app, and returns
	// it. ErrNotFound if the app does not exist; an error from fn is
	// returned as is and nothing is written. fn must not change the key.
	UpdateApp(ctx context.Context, key string, fn func(*App) error) (App, error)

	// CreateDevices stores the devices atomically (all or none on a
	// storage failure). The returned slice has one entry per device:
	// nil, or ErrAlreadyExists when the name is taken in the app or
	// appears earlier in the same call. Each new device gets NewShadow.
	CreateDevices(ctx context.Context, appKey string, devices []Device) ([]error, error)
	// GetDevice returns the device or ErrNotFound.
	GetDevice(ctx context.Context, appKey, name string) (Device, error)
	// UpdateDevice applies fn to the stored device (base info and
	// presence) and stores the result, atomically with respect to every
	// other write of the device, and returns it. ErrNotFound if the
	// device does not exist; an error from fn is returned as is and
	// nothing is written. fn must not change the app key or name.
	UpdateDevice(ctx context.Context, appKey, name string, fn func(*Device) error) (Device, error)
	// ListDevices returns up to limit devices whose names start with
	// prefix, in name order, starting after cursor ("" for the start).
	ListDevices(ctx context.Context, appKey, prefix, cursor string, limit int) (DevicePage, error)
	// CountDevices returns how many devices the app has. It is cheap
	// enough to call on every console overview: a backend keeps the
	// count or reads it in O(1) after a first scan.
	CountDevices(ctx context.Context, appKey string) (int64, error)
	// DeleteDevice removes the device, its shadow, its pending-queue
	// entries and pending count and its online-index entry (so
	// ResetPresence no longer counts it), atomically: one write, ordered
	// with every other write of the device and with CreateDevices. The
	// device's messages stay readable by id and are not changed; callers
	// fail its pending messages first (one still pending leaves the queue
	// but keeps its state and its place in ExpiredMessages). Afterwards
	// the name is free: CreateDevices makes a new device with NewShadow
	// and an empty queue whose count starts at 0. ErrNotFound if the
	// device does not exist. The events evs are appended to the event
	// log in the same write as the delete (none when it fails).
	DeleteDevice(ctx context.Context, appKey, name string, evs ...Event) error

	// GetShadow returns the device's shadow or ErrNotFound.
	GetShadow(ctx context.Context, appKey, name string) (Shadow, error)
	// SetDesired applies a desired-property update atomically with
	// recording seq (when seq is not nil, it is stored under seqNo). It
	// fails with ErrSeqUsed (nothing written) if the seq_no is recorded
	// and unexpired, ErrNotFound if the device does not exist and
	// ErrVersionConflict if u.Version is not LastDesiredVersion. On
	// success LastDesiredVersion advances by one and the new shadow is
	// returned.
	SetDesired(ctx context.Context, u DesiredUpdate, seqNo int64, seq *SeqEntry) (Shadow, error)

	// GetSeq returns the unexpired entry for the app's seq_no, or
	// ErrNotFound. It is a durable read: an entry it returns is durable
	// (it waits for the write that stored it), so its response may be
	// replayed at once.
	GetSeq(ctx context.Context, appKey string, seqNo int64) (SeqEntry, error)
	// PutSeq records an entry for the app's seq_no if none is unexpired;
	// ErrSeqUsed otherwise.
	PutSeq(ctx context.Context, appKey string, seqNo int64, e SeqEntry) error

	// CreateMessage stores a new message atomically with recording seq
	// (when not nil). A message in StatePending is appended to its
	// device's pending queue, failing with ErrQueueFull (nothing written)
	// when the queue holds MaxPending messages, and with ErrNotFound when
	// the device does not exist (it may have been deleted since the
	// caller looked); a message in any other state is stored without
	// queueing. ErrSeqUsed as for SetDesired.
	CreateMessage(ctx context.Context, m Message, seqNo int64, seq *SeqEntry) error
	// GetMessage returns the app's message with the id or ErrNotFound.
	GetMessage(ctx context.Context, appKey string, id int64) (Message, error)
	// LastMessageID returns the highest message id stored, 0 when there
	// is none, so a restarted node never hands out an id again even if
	// its clock went back.
	LastMessageID(ctx context.Context) (int64, error)
	// PendingMessages returns up to limit of the device's pending
	// messages in send order.
	PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]Message, error)
	// PendingIDs returns the ids of up to limit of the device's pending
	// messages in send order: PendingMessages without reading the
	// messages, for a caller that holds most of them already.
	PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error)
	// ListMessages returns up to limit of the app's messages with ids
	// below before (0: from the newest), newest first: every state, for
	// people browsing what was sent. It reads an index per app, so its
	// cost grows with what it returns, not with the messages stored.
	ListMessages(ctx context.Context, appKey string, before int64, limit int) ([]Message, error)

	// UpdateMessage applies fn to the app's message and stores the
	// result, atomically with respect to every other write of the
	// message's device, and returns it. fn may change State and append
	// Records, never remove them. When State leaves StatePending the
	// message leaves its device's queue. Every record fn appends is added
	// to the outbox in the same write. ErrNotFound if the message does not
	// exist or belongs to another app; an error from fn is returned as is
	// and nothing is written.
	UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*Message) error) (Message, error)
	// UpdateMessages applies each update as UpdateMessage would and
	// returns one error per update, in order: nil when it is stored, an
	// error from its Fn as is, ErrNotFound as for UpdateMessage. Each
	// update is atomic with respect to the other writes of its message's
	// device; the updates together need not be (a backend may store them
	// in one write, or one by one). Updates of the same message apply in
	// order, each to the result of the one before. Every update is
	// durable when the call returns. The second result is an error that
	// kept every update from being tried (a closed store).
	UpdateMessages(ctx context.Context, updates []MessageUpdate) ([]error, error)
	// ExpiredMessages returns up to limit pending messages whose
	// ExpireTime is before the Unix second before, earliest first.
	ExpiredMessages(ctx context.Context, before int64, limit int) ([]Message, error)

	// ReadOutbox returns the heads of up to limit of the oldest outbox
	// entries with Seq above after, in Seq order; the records themselves
	// are read from the delivery queues they are routed to. CreateMessage
	// adds a message's first records to the outbox. Seqs are unique
	// across the outbox and every delivery queue, but concurrent writes
	// may become visible out of Seq order: a reader that moves after
	// forward must read again from below a Seq it skipped to pick up a
	// straggler (not every skipped Seq belongs to one).
	ReadOutbox(ctx context.Context, after int64, limit int) ([]OutboxHead, error)

	// RouteOutbox moves entries out of the outbox atomically: each one is
	// deleted from the outbox and, when its URL is not "", appended as
	// stored to the delivery queue of (its app, URL), keeping its Seq. A
	// route of an entry no longer in the outbox does nothing.
	RouteOutbox(ctx context.Context, routes []OutboxRoute) error
	// CallbackQueues lists the delivery queues that hold entries.
	CallbackQueues(ctx context.Context) ([]CallbackQueue, error)
	// ReadCallbacks returns up to limit of the oldest entries of a
	// delivery queue with Seq above after, in Seq order. A redelivered
	// dead letter may become visible behind a reader's after. It is a
	// durable read: every entry it returns is durable (it waits for the
	// writes that stored and routed them), so it may be delivered at once.
	ReadCallbacks(ctx context.Context, q CallbackQueue, after int64, limit int) ([]OutboxEntry, error)
	// DeleteCallbacks removes delivered entries from a delivery queue;
	// absent ones are ignored.
	DeleteCallbacks(ctx context.Context, q CallbackQueue, seqs []int64) error
	// MoveCallbacks moves entries from the queue from to the end of the
	// app's queue for toURL (with new Seqs, the same IDs), atomically.
	MoveCallbacks(ctx context.Context, from CallbackQueue, entries []OutboxEntry, toURL string) error
	// PutDeadLetter stores d and removes its entries from the delivery
	// queue of (d.AppKey, d.URL), atomically. d.ID is the decimal Seq of
	// its first entry; ErrAlreadyExists if the app has a dead letter
	// with that id.
	PutDeadLetter(ctx context.Context, d DeadLetter) error
	// ListDeadLetters returns up to limit of the app's dead letters,
	// oldest first, starting after the id cursor ("" for the start).
	ListDeadLetters(ctx context.Context, appKey, cursor string, limit int) ([]DeadLetter, error)
	// RedeliverDeadLetter deletes the app's dead letter and puts its
	// entries back at the end of their delivery queue (with new Seqs,
	// the same IDs), atomically, and returns it. ErrNotFound if absent.
	RedeliverDeadLetter(ctx context.Context, appKey, id string) (DeadLetter, error)

	// ReportProperties applies a device's report: reported values and
	// times, SDK and app versions, LastReportedVersion. ErrNotFound if the
	// device does not exist, ErrVersionConflict (nothing written) if
	// r.Version is not 0 and not above LastReportedVersion. r.Emit's
	// events are appended in the same write (see Report).
	ReportProperties(ctx context.Context, r Report) (Shadow, error)

	// ResetPresence marks offline, with LastLogoutTime now (Unix
	// seconds), every online device held by node (Device.Node; every
	// online device when node is AllNodes) whose LastLoginTime is before
	// loginBefore, and returns how many it changed. Each device's check
	// and write are atomic with its other writes. A node calls it at
	// start for itself, as connections do not survive a restart and a
	// crash leaves no logout behind; in cluster mode the other nodes call
	// it for a node that died, with loginBefore the moment they saw it
	// dead, so that devices it holds again after a restart stay online.
	// offline, when not nil, is called with each device it resets, as it
	// was before the reset, and the events it returns are appended to the
	// event log in the same write as that device's reset. A backend that
	// retries a device's write (optimistic locking) calls it again, and
	// may have called it for a device that it then leaves alone: offline
	// must have no side effects; only the events of a write that lands
	// are appended.
	ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(Device) []Event) (int, error)

	// GetMeta and PutMeta hold small service-wide values (for example the
	// generated admin password hash). GetMeta returns ErrNotFound if unset.
	GetMeta(ctx context.Context, key string) ([]byte, error)
	PutMeta(ctx context.Context, key string, value []byte) error
	// CreateMeta stores value under key unless the key is set, atomically
	// with respect to every other meta write; ErrAlreadyExists if it is.
	// Nodes starting together use it to agree on one generated value.
	CreateMeta(ctx context.Context, key string, value []byte) error

	// Barrier returns once every write that a read made before the call
	// could see is durable (see "What is durable" above). A caller that
	// hands to someone outside the process what it built from reads other
	// than the durable ones (GetSeq, ReadCallbacks, ReadEvents) calls it
	// once in between: otherwise a crash could take back what was
	// already told. A broadcast step's CreateMessages may return before
	// its write is durable (see Fleet), and Barrier covers it too.
	// Concurrent calls share one sync, and a call with no write in flight
	// returns at once. Deletions of entries that already count as absent
	// (expired seq_nos) are exempt; no read can tell them apart.
	Barrier(ctx context.Context) error

	// EventLog keeps every app's event log.
	EventLog

	// Fleet holds tags, batch sends and broadcasts.
	Fleet

	// Commands keeps device commands.
	Commands

	// Jobs keeps jobs and their executions.
	Jobs

	// Ping reports whether the store can serve requests.
	Ping(ctx context.Context) error
	// Close releases the store; pending writes are already durable.
	Close() error
}
