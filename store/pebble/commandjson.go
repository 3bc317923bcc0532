package pebble

import (
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// appendCommand appends json.Marshal(c) to b, field by field: a command
// is encoded by each of its writes (created, sent, delivered, answered),
// and encoding/json's reflection over it was a twentieth of the server's
// CPU in command-batch. Strings that need escaping and params or results
// that are not already compact go through encoding/json, so the output
// is always json.Marshal's (commandjson_test.go holds it to that).
func appendCommand(b []byte, c *store.Command) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, c.ID, 10)
	b = append(b, `,"app_key":`...)
	b = jsonfast.AppendString(b, c.AppKey)
	b = append(b, `,"device_name":`...)
	b = jsonfast.AppendString(b, c.DeviceName)
	b = append(b, `,"name":`...)
	b = jsonfast.AppendString(b, c.Name)
	var err error
	if len(c.Params) > 0 {
		b = append(b, `,"params":`...)
		if b, err = jsonfast.AppendRaw(b, c.Params); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"ttl":`...)
	b = strconv.AppendInt(b, c.TTL, 10)
	b = append(b, `,"timeout":`...)
	b = strconv.AppendInt(b, c.Timeout, 10)
	b = append(b, `,"state":`...)
	b = jsonfast.AppendString(b, c.State)
	b = appendIntField(b, `,"code":`, int64(c.Code))
	if len(c.Result) > 0 {
		b = append(b, `,"result":`...)
		if b, err = jsonfast.AppendRaw(b, c.Result); err != nil {
			return nil, err
		}
	}
	if c.Message != "" {
		b = append(b, `,"message":`...)
		b = jsonfast.AppendString(b, c.Message)
	}
	if c.Answered {
		b = append(b, `,"answered":true`...)
	}
	b = appendIntField(b, `,"progress":`, int64(c.Progress))
	b = append(b, `,"time_create":`...)
	b = strconv.AppendInt(b, c.TimeCreate, 10)
	b = appendIntField(b, `,"time_sent":`, c.TimeSent)
	b = appendIntField(b, `,"time_delivered":`, c.TimeDelivered)
	b = appendIntField(b, `,"time_done":`, c.TimeDone)
	b = appendIntField(b, `,"deadline":`, c.Deadline)
	b = appendIntField(b, `,"job":`, c.Job)
	b = appendIntField(b, `,"job_index":`, c.JobIndex)
	b = appendIntField(b, `,"attempt":`, int64(c.Attempt))
	return append(b, '}'), nil
}

// appendIntField appends key and n unless n is 0 (omitempty).
func appendIntField(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}
