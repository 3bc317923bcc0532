package restapi

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
)

// A batch send names up to 1000 devices in device_names, and reading that
// array twice through encoding/json (once for the names, once more,
// decoded into []any and encoded again, for the seq_no fingerprint) was
// a sixth of what the REST layer spent on a batch send in fan-out. An
// array of plain strings (plainString), the usual one, is read here
// directly; any other takes the decoder's way as before, so the results
// are the same (plainarray_test.go holds them to it).

// scanPlainArray reports whether raw is a JSON array whose every element
// is a string literal that plainString takes, calling each (when not nil)
// with the offsets of each element's text between its quotes, in order.
// compact is false when white space stands between the elements.
func scanPlainArray(raw []byte, each func(start, end int)) (n int, compact, ok bool) {
	end, n, spaced := jsonfast.StringArray(raw, 0, jsonfast.VerbatimStringEnd, each)
	if end != len(raw) {
		return 0, false, false
	}
	return n, !spaced, true
}

// plainStrings is stringArray for an array of plain strings: the names
// share one copy of raw. ok is false for any other value.
func plainStrings(raw []byte) (out []string, ok bool) {
	n, _, ok := scanPlainArray(raw, nil)
	if !ok {
		return nil, false
	}
	text := string(raw)
	out = make([]string, 0, n)
	scanPlainArray(raw, func(start, end int) { out = append(out, text[start:end]) })
	return out, true
}

// canonicalPlainArray is canonicalValue for an array of plain strings:
// raw itself when compact, else raw without its white space. ok is false
// for any other value.
func canonicalPlainArray(raw []byte) (out []byte, ok bool) {
	_, compact, ok := scanPlainArray(raw, nil)
	if !ok || compact {
		return raw, ok
	}
	out = make([]byte, 0, len(raw))
	out = append(out, '[')
	scanPlainArray(raw, func(start, end int) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), raw[start:end]...), '"')
	})
	return append(out, ']'), true
}

// canonicalFlatObject is canonicalValue for an object whose keys are
// plain (jsonfast.Verbatim) and in the order encoding/json sorts them,
// and whose values are plain strings, integers spelled as strconv spells
// them, true, false or null: the members written compactly, which is
// what the decoder's way writes. ok is false for any other value. Such
// params ({"url":...,"version":...,"size":N}) are the usual ones of a
// command, and decoding them into a map to encode them again was a
// fifteenth of what a command send allocated.
func canonicalFlatObject(raw []byte) (out []byte, ok bool) {
	out = make([]byte, 0, len(raw))
	out = append(out, '{')
	var last []byte
	var num [20]byte
	ok = jsonfast.Object(raw, jsonfast.FlatValueEnd, func(key, value []byte) bool {
		if !jsonfast.Verbatim(key) || len(out) > 1 && bytes.Compare(last, key) >= 0 {
			return false
		}
		switch value[0] {
		case '"':
			if jsonfast.VerbatimStringEnd(value, 0) != len(value) {
				return false
			}
		case 't', 'f', 'n':
		default:
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || !bytes.Equal(strconv.AppendInt(num[:0], n, 10), value) {
				return false
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(append(out, '"'), key...), `":`...), value...)
		last = key
		return true
	})
	return append(out, '}'), ok
}

// canonicalComposite is canonicalValue for an object or an array:
// decoded with numbers kept as written, numbers spelled one way and
// encoded again, which sorts object keys and escapes strings one way.
func canonicalComposite(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	b, err := json.Marshal(normalizeNumbers(v))
	if err != nil {
		return raw
	}
	return b
}
