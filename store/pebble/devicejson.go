package pebble

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// Devices are decoded on every fan-out chunk (its targets' flags, twice:
// before and after the write), and encoding/json took a fifth of the
// server's CPU in a 100,000-device broadcast. decodeDevice reads the
// stored form, which this package writes with encoding/json, by hand:
// a flat object of known keys whose strings hold no escapes. Anything
// else (an escape, a fraction, a nested value it does not know) goes to
// encoding/json, so the result is always what json.Unmarshal gives.

// decodeDevice is json.Unmarshal(v, d) for a stored device.
func decodeDevice(v []byte, d *store.Device) error {
	var fast store.Device
	if decodeDeviceFast(v, &fast) {
		*d = fast
		return nil
	}
	return json.Unmarshal(v, d)
}

// deviceFlag returns the flag of a stored device, FlagEnabled if it has
// none (as json.Unmarshal into a struct holding FlagEnabled would).
func deviceFlag(v []byte) (int, error) {
	if flag, ok := storedFlag(v); ok {
		return flag, nil
	}
	flag := store.FlagEnabled
	ok := eachField(v, func(k, val []byte) bool {
		if string(k) != "flag" {
			// encoding/json matches keys regardless of case.
			return !bytes.EqualFold(k, []byte("flag"))
		}
		var ok bool
		flag, ok = parseIntAs[int](val)
		return ok
	})
	if ok {
		return flag, nil
	}
	var f struct {
		Flag int `json:"flag"`
	}
	f.Flag = store.FlagEnabled
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, err
	}
	return f.Flag, nil
}

// storedFlag reads the flag of a device as the store writes it
// (json.Marshal of store.Device: its fields in order, no spaces), where
// only four strings come before it: the rest of the device (times,
// address, node, tags) is not stepped through, as eachField did for every
// device a broadcast's POST lists. ok is false for another layout, which
// deviceFlag reads field by field.
func storedFlag(v []byte) (flag int, ok bool) {
	i := 0
	for _, name := range []string{`{"app_key":`, `,"name":`, `,"mark":`, `,"secret":`} {
		if !bytes.HasPrefix(v[i:], []byte(name)) {
			return 0, false
		}
		i += len(name)
		if i >= len(v) || v[i] != '"' {
			return 0, false
		}
		if i = jsonfast.StringEnd(v, i); i < 0 {
			return 0, false
		}
	}
	const name = `,"flag":`
	if !bytes.HasPrefix(v[i:], []byte(name)) {
		return 0, false
	}
	i += len(name)
	j := i
	for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '-') {
		j++
	}
	if j == i || j >= len(v) || v[j] != ',' && v[j] != '}' {
		return 0, false
	}
	return parseIntAs[int](v[i:j])
}

// decodeDeviceFast decodes v into the zero device d and reports whether
// it could; when not, d is to be thrown away.
func decodeDeviceFast(v []byte, d *store.Device) bool {
	return eachField(v, func(k, val []byte) bool {
		var ok bool
		switch string(k) {
		case "app_key":
			d.AppKey, ok = plainString(val)
		case "name":
			d.Name, ok = plainString(val)
		case "mark":
			d.Mark, ok = plainString(val)
		case "secret":
			d.Secret, ok = plainString(val)
		case "client_ip":
			d.ClientIP, ok = plainString(val)
		case "conn":
			d.Conn, ok = plainString(val)
		case "flag":
			d.Flag, ok = parseIntAs[int](val)
		case "status":
			d.Status, ok = parseIntAs[int](val)
		case "node":
			d.Node, ok = parseIntAs[int](val)
		case "time_create":
			d.TimeCreate, ok = parseInt(val)
		case "time_active":
			d.TimeActive, ok = parseInt(val)
		case "last_login_time":
			d.LastLoginTime, ok = parseInt(val)
		case "last_logout_time":
			d.LastLogoutTime, ok = parseInt(val)
		case "tags":
			d.Tags, ok = plainStrings(val)
		}
		// An unknown key (another case of a known one, a field this
		// decoder does not know yet) is left to encoding/json.
		return ok
	})
}

// eachField calls fn with each key and raw value of the JSON object v,
// in order, and reports whether v was a flat object this scanner reads
// exactly (keys and string values without escapes, values of other
// kinds left to fn) and fn returned true for every field.
func eachField(v []byte, fn func(k, val []byte) bool) bool {
	return jsonfast.Object(v, deviceValueEnd, fn)
}

// deviceValueEnd returns the index after the value starting at v[i]: a
// plain string, a number, true, false, null, or an array of plain strings
// (a device's tags); -1 for anything else.
func deviceValueEnd(v []byte, i int) int {
	if i < len(v) && v[i] == '[' {
		return jsonfast.PlainArrayEnd(v, i)
	}
	return jsonfast.FlatValueEnd(v, i)
}

// plainString returns the string val (a plain JSON string) holds; not ok
// for null or anything else (left to encoding/json).
func plainString(val []byte) (string, bool) {
	text, ok := jsonfast.PlainText(val)
	if !ok {
		return "", false
	}
	return string(text), true
}

// plainStrings decodes an array of plain strings (nil for []... as
// encoding/json gives an empty, non-nil slice for [], so does this).
func plainStrings(val []byte) ([]string, bool) {
	// Text that is not UTF-8 decodes to U+FFFD: left to encoding/json.
	if !utf8.Valid(val) {
		return nil, false
	}
	end, n, _ := jsonfast.StringArray(val, 0, jsonfast.PlainStringEnd, nil)
	if end != len(val) {
		return nil, false
	}
	out := make([]string, 0, n)
	jsonfast.StringArray(val, 0, jsonfast.PlainStringEnd, func(start, end int) {
		out = append(out, string(val[start:end]))
	})
	return out, true
}

// parseInt decodes a JSON integer; not ok for anything else (null, a
// fraction, an exponent), which encoding/json then decides.
func parseInt(val []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(val), 10, 64)
	if err != nil || val[0] == '+' || len(val) > 1 && val[0] == '0' || len(val) > 2 && val[0] == '-' && val[1] == '0' {
		return 0, false
	}
	return n, true
}

func parseIntAs[T ~int](val []byte) (T, bool) {
	n, ok := parseInt(val)
	if !ok || int64(T(n)) != n {
		return 0, false
	}
	return T(n), true
}
