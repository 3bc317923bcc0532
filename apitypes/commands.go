package apitypes

import "encoding/json"

// CommandRequest is the body of POST /cmd/v1/cmd. Nil fields take their
// defaults.
type CommandRequest struct {
	SeqNo      int64           `json:"seq_no"`
	DeviceName string          `json:"device_name"`
	Name       string          `json:"name"`
	Params     json.RawMessage `json:"params,omitempty"`
	TTL        *int64          `json:"ttl,omitempty"`
	Timeout    *int64          `json:"timeout,omitempty"`
	Wait       *int64          `json:"wait,omitempty"`
}

// CommandBatchRequest is the body of POST /cmd/v1/cmds: one command to
// each of up to 1000 devices.
type CommandBatchRequest struct {
	SeqNo       int64           `json:"seq_no"`
	DeviceNames []string        `json:"device_names"`
	Name        string          `json:"name"`
	Params      json.RawMessage `json:"params,omitempty"`
	TTL         *int64          `json:"ttl,omitempty"`
	Timeout     *int64          `json:"timeout,omitempty"`
	Wait        *int64          `json:"wait,omitempty"`
}

// Command is a command as the API shows it: its state, its answer once
// there is one, and its times (Unix ms, 0 until they happen). Code is
// the device's code once it answered, or the reason of a rejection
// (3003, 3004, 3007); Message and Result come with it.
type Command struct {
	CmdID         int64           `json:"cmd_id"`
	DeviceName    string          `json:"device_name"`
	Name          string          `json:"name"`
	State         string          `json:"state"`
	Code          *int            `json:"code,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Message       string          `json:"message,omitempty"`
	Progress      int             `json:"progress"`
	TimeCreate    int64           `json:"time_create"`
	TimeSent      int64           `json:"time_sent"`
	TimeDelivered int64           `json:"time_delivered"`
	TimeDone      int64           `json:"time_done"`
}

// CommandRefused is the element of a batch's answer for a name that was
// refused: unknown, or repeated in the request (code 1003).
type CommandRefused struct {
	DeviceName string `json:"device_name"`
	Code       int    `json:"code"`
	Message    string `json:"message"`
}

// CommandBatchAnswer is the answer to POST /cmd/v1/cmds: per name, in
// request order, a Command or a CommandRefused.
type CommandBatchAnswer struct {
	Resp []json.RawMessage `json:"resp"`
}
