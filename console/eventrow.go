package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/devmsg/devmsg/apitypes"
)

// lineBytes is the most of an event's one-line summary sent to the
// browser; the stylesheet cuts it to the column's width.
const lineBytes = 400

// eventRow is one event as the live view shows it: one line, with the
// whole event one click away.
type eventRow struct {
	ID, Type, Device string
	Time             int64
	AppKey           string
	// Line is the data on one line: for telemetry the payload decoded
	// (text as it was sent, bytes in hex) after its Topic, for other
	// events the data as compact JSON.
	Topic string
	Line  string
	// Data is the data object pretty-printed; Payload, for telemetry
	// whose payload is JSON, that payload pretty-printed (and left out
	// of Data, where it would be an escaped string).
	Data    string
	Payload string
}

func newEventRow(w apitypes.Event) eventRow {
	r := eventRow{ID: w.ID, Type: w.Type, Device: w.DeviceName, Time: w.Time, AppKey: w.AppKey}
	data := unescapeHTML(w.Data)
	var pretty, compact bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") == nil && json.Compact(&compact, data) == nil {
		r.Data, r.Line = pretty.String(), compact.String()
	} else {
		r.Data, r.Line = string(w.Data), string(w.Data)
	}
	if w.Type == "device.up" {
		var up struct {
			Topic    string `json:"topic"`
			QoS      int    `json:"qos"`
			Payload  string `json:"payload"`
			Encoding string `json:"encoding"`
		}
		if json.Unmarshal(data, &up) == nil {
			text, payload := decodePayload(up.Payload, up.Encoding)
			r.Topic, r.Line, r.Payload = up.Topic, text, payload
			if payload != "" {
				r.Data = fmt.Sprintf("{\n  \"topic\": %q,\n  \"qos\": %d,\n  \"encoding\": %q\n}", up.Topic, up.QoS, up.Encoding)
			}
		}
	}
	r.Line = clip(strings.Join(strings.Fields(r.Line), " "), lineBytes)
	return r
}

// decodePayload reads a telemetry payload: text as it is (and, when it
// is JSON, pretty-printed too), bytes as hex.
func decodePayload(payload, encoding string) (text, prettyJSON string) {
	if encoding == "base64" {
		raw, err := base64.StdEncoding.DecodeString(payload)
		if err != nil {
			return payload, ""
		}
		if len(raw) > lineBytes/3 {
			return fmt.Sprintf("% x… (%d bytes)", raw[:lineBytes/3], len(raw)), ""
		}
		return fmt.Sprintf("% x (%d bytes)", raw, len(raw)), ""
	}
	if !utf8.ValidString(payload) {
		return payload, ""
	}
	var pretty bytes.Buffer
	if t := strings.TrimSpace(payload); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
		if json.Indent(&pretty, []byte(t), "", "  ") == nil {
			return payload, pretty.String()
		}
	}
	return payload, ""
}
