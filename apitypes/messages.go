package apitypes

import "encoding/json"

// MessageCallback is the optional callback object of a send: a URL that
// gets this message's records instead of the app's default, and params
// echoed in each record.
type MessageCallback struct {
	URL    string          `json:"url,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

// SendRequest is the body of POST /msg/v1/msg. TTL nil takes the default.
type SendRequest struct {
	SeqNo      int64            `json:"seq_no"`
	DeviceName string           `json:"device_name"`
	MsgBody    string           `json:"msg_body"`
	TTL        *int64           `json:"ttl,omitempty"`
	Callback   *MessageCallback `json:"callback,omitempty"`
}

// SendAnswer is the answer to POST /msg/v1/msg.
type SendAnswer struct {
	MsgID int64 `json:"msgid"`
}

// BatchSendRequest is the body of POST /msg/v1/msgs: one message to each
// of up to 1000 devices.
type BatchSendRequest struct {
	SeqNo       int64            `json:"seq_no"`
	DeviceNames []string         `json:"device_names"`
	MsgBody     string           `json:"msg_body"`
	TTL         *int64           `json:"ttl,omitempty"`
	Callback    *MessageCallback `json:"callback,omitempty"`
}

// BatchResult is one device's result of a batch send, in request order:
// code 0 and the msgid when the message was stored.
type BatchResult struct {
	DeviceName string `json:"device_name"`
	Code       int    `json:"code"`
	MsgID      int64  `json:"msgid,omitempty"`
	Message    string `json:"message,omitempty"`
}

// BatchSendAnswer is the answer to POST /msg/v1/msgs.
type BatchSendAnswer struct {
	Resp []BatchResult `json:"resp"`
}

// BroadcastTarget is a broadcast's target: one tag, or all devices.
type BroadcastTarget struct {
	Tag string `json:"tag,omitempty"`
	All bool   `json:"all,omitempty"`
}

// BroadcastRequest is the body of POST /msg/v1/broadcast.
type BroadcastRequest struct {
	SeqNo    int64            `json:"seq_no"`
	Target   BroadcastTarget  `json:"target"`
	MsgBody  string           `json:"msg_body"`
	TTL      *int64           `json:"ttl,omitempty"`
	Callback *MessageCallback `json:"callback,omitempty"`
}

// BroadcastCreated is the answer to POST /msg/v1/broadcast: the
// broadcast's id and the devices it targets.
type BroadcastCreated struct {
	BroadcastID int64 `json:"broadcast_id"`
	Targets     int64 `json:"targets"`
}

// Broadcast is the answer to GET and DELETE /msg/v1/broadcast: the
// broadcast's state and progress.
type Broadcast struct {
	BroadcastID int64  `json:"broadcast_id"`
	State       string `json:"state"`
	Targets     int64  `json:"targets"`
	Queued      int64  `json:"queued"`
	Delivered   int64  `json:"delivered"`
	Expired     int64  `json:"expired"`
	Failed      int64  `json:"failed"`
	Retracted   int64  `json:"retracted"`
	TimeCreate  int64  `json:"time_create"` // Unix seconds
}

// RecordError is the error object of record types 1, 3, 5 and 8.
type RecordError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Record is one message-status record (docs/callbacks.md, "Record
// fields"), as a message's trace and a callback show it: ID is the
// record's stable id ("<msgid>-<index>"), the one its callback carries.
type Record struct {
	ID         string          `json:"id"`
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

// Message is the answer to GET and DELETE /msg/v1/msg: a message with its
// status records, oldest first.
type Message struct {
	MsgID      int64    `json:"msgid"`
	DeviceName string   `json:"device_name"`
	State      string   `json:"state"`
	TTL        int64    `json:"ttl"`
	TimeCreate int64    `json:"time_create"` // Unix seconds
	Records    []Record `json:"records"`
}

// MessagePage is the answer to GET /admin/v1/apps/{key}/messages: the
// app's messages newest first, and the cursor of the next page ("" after
// the last).
type MessagePage struct {
	Messages   []Message `json:"messages"`
	NextCursor string    `json:"next_cursor"`
}
