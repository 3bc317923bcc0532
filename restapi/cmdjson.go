package restapi

import (
	"strconv"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// The command answers, written by hand: every command call answers one
// or a thousand command documents, and encoding/json's reflection over
// them (and its second pass over a batch's elements) was a twentieth of
// the server's CPU in command-batch. Each appender writes the bytes
// json.Marshal writes for the same value (cmdjson_test.go holds them to
// it), so answers and recorded seq_no replays read as before.

// appendCommandView appends json.Marshal(v).
func appendCommandView(b []byte, v *apitypes.Command) ([]byte, error) {
	b = append(b, `{"cmd_id":`...)
	b = strconv.AppendInt(b, v.CmdID, 10)
	b = append(b, `,"device_name":`...)
	b = jsonfast.AppendString(b, v.DeviceName)
	b = append(b, `,"name":`...)
	b = jsonfast.AppendString(b, v.Name)
	b = append(b, `,"state":`...)
	b = jsonfast.AppendString(b, v.State)
	if v.Code != nil {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(*v.Code), 10)
	}
	if len(v.Result) > 0 {
		b = append(b, `,"result":`...)
		var err error
		if b, err = jsonfast.AppendRaw(b, v.Result); err != nil {
			return nil, err
		}
	}
	if v.Message != "" {
		b = append(b, `,"message":`...)
		b = jsonfast.AppendString(b, v.Message)
	}
	b = append(b, `,"progress":`...)
	b = strconv.AppendInt(b, int64(v.Progress), 10)
	b = append(b, `,"time_create":`...)
	b = strconv.AppendInt(b, v.TimeCreate, 10)
	b = append(b, `,"time_sent":`...)
	b = strconv.AppendInt(b, v.TimeSent, 10)
	b = append(b, `,"time_delivered":`...)
	b = strconv.AppendInt(b, v.TimeDelivered, 10)
	b = append(b, `,"time_done":`...)
	b = strconv.AppendInt(b, v.TimeDone, 10)
	return append(b, '}'), nil
}

// appendCommandRefused appends json.Marshal(v).
func appendCommandRefused(b []byte, v *apitypes.CommandRefused) []byte {
	b = append(b, `{"device_name":`...)
	b = jsonfast.AppendString(b, v.DeviceName)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(v.Code), 10)
	b = append(b, `,"message":`...)
	b = jsonfast.AppendString(b, v.Message)
	return append(b, '}')
}

// appendResult appends r as an element of a batch answer: the command
// document, or the refusal of its name.
func appendResult(b []byte, r command.Result) ([]byte, error) {
	if r.Refused() {
		return appendCommandRefused(b, &apitypes.CommandRefused{DeviceName: r.DeviceName, Code: r.Code, Message: r.Message}), nil
	}
	v := viewCommand(r.Command)
	return appendCommandView(b, &v)
}

// encodeCommands is the answer to a command call: the document of the
// one command, or the batch answer (apitypes.CommandBatchAnswer) of rs.
func encodeCommands(rs []command.Result, batch bool) ([]byte, error) {
	if !batch {
		v := viewCommand(rs[0].Command)
		return appendCommandView(nil, &v)
	}
	b := make([]byte, 0, 256*len(rs)+16)
	b = append(b, `{"resp":[`...)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendResult(b, r); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// seqRecord is what a command send's seq_no records of its answer, cs
// as command.Service.Send hands them to its store.CommandSeq: the
// cmd_id of each command and the refusal of each refused name, in the
// answer's shape (cmdReplay reads either). A replay reads the commands
// again to answer with their state then, so the record holds no more.
func seqRecord(cs []store.Command, batch bool) []byte {
	b := make([]byte, 0, 16+32*len(cs))
	if batch {
		b = append(b, `{"resp":[`...)
	}
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		if cs[i].ID == 0 {
			b = appendCommandRefused(b, &apitypes.CommandRefused{DeviceName: cs[i].DeviceName, Code: cs[i].Code, Message: cs[i].Message})
			continue
		}
		b = append(b, `{"cmd_id":`...)
		b = strconv.AppendInt(b, cs[i].ID, 10)
		b = append(b, '}')
	}
	if batch {
		b = append(b, "]}"...)
	}
	return b
}
