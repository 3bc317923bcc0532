package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxReportTime is the highest report time: 2^53-1, the largest integer
// every JSON parser holds exactly, so a report's time reads the same in
// every language.
const MaxReportTime = 1<<53 - 1

// reportKeys are the keys of an event report; other keys are ignored.
var reportKeys = []string{"name", "content", "type", "time"}

// ParseReport checks an event report's payload (docs/device-protocol.md,
// "Event reports") and returns its data; the default time is
// now. It is strict, so that what a device sends means one thing: at
// most MaxPayload bytes of UTF-8 holding one JSON object; keys exact in
// case, none twice, and none a known key in another case ("Name");
// name a string of 1 to 32 bytes without control characters; content,
// if present, a string of at most 2048 bytes without NUL; type the
// integer 0, 1 or 2; time, if present, an integer from 0 to 2^53-1. A
// null is no value. Other keys are ignored.
func ParseReport(payload []byte, now time.Time) (Report, error) {
	bad := func(format string, args ...any) (Report, error) {
		return Report{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(payload) > MaxPayload {
		return bad("a report is at most %d bytes", MaxPayload)
	}
	if !utf8.Valid(payload) {
		return bad("not UTF-8")
	}
	fields, err := objectFields(payload)
	if err != nil {
		return bad("%v", err)
	}
	r := Report{Time: now.UnixMilli()}
	name, ok := fields["name"]
	switch {
	case !ok || json.Unmarshal(name, &r.Name) != nil || isNull(name) || len(r.Name) < 1 || len(r.Name) > MaxNameLen:
		return bad("name must be a string of 1 to %d bytes", MaxNameLen)
	case strings.ContainsFunc(r.Name, isControl):
		return bad("name must not hold control characters")
	}
	if c, ok := fields["content"]; ok {
		switch {
		case json.Unmarshal(c, &r.Content) != nil || isNull(c) || len(r.Content) > MaxContent:
			return bad("content must be a string of at most %d bytes", MaxContent)
		case strings.ContainsRune(r.Content, 0):
			return bad("content must not hold NUL")
		}
	}
	typ, ok := fields["type"]
	if !ok || json.Unmarshal(typ, &r.Type) != nil || isNull(typ) || r.Type < 0 || r.Type > 2 {
		return bad("type must be 0, 1 or 2")
	}
	if t, ok := fields["time"]; ok {
		if json.Unmarshal(t, &r.Time) != nil || isNull(t) || r.Time < 0 || r.Time > MaxReportTime {
			return bad("time must be an integer of Unix ms from 0 to %d", int64(MaxReportTime))
		}
	}
	return r, nil
}

// objectFields returns the members of the one JSON object payload holds,
// refusing a key twice, a known key in another case, and anything after
// the object.
func objectFields(payload []byte) (map[string]json.RawMessage, error) {
	errObject := errors.New("not a JSON object")
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errObject
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errObject
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errObject
		}
		if _, dup := fields[key]; dup {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		for _, k := range reportKeys {
			if key != k && strings.EqualFold(key, k) {
				return nil, fmt.Errorf("key %q: keys are lower case (%q)", key, k)
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, errObject
		}
		fields[key] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not one JSON object: something follows it")
	}
	return fields, nil
}

func isNull(v json.RawMessage) bool { return string(v) == "null" }

// isControl reports a C0 control character or DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
