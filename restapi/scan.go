package restapi

import "encoding/json"

// scanFlatObject reads the bodies most requests send: one JSON object
// whose keys are printable ASCII with no escapes and whose values are
// strings with no escapes, numbers, true, false or null, with white space
// around the object allowed. It answers what json.Unmarshal into an
// object answers for such a body (the last of duplicate keys wins), its
// values slices of raw. Any other input, valid or not, makes ok false and
// the caller decodes with encoding/json.
func scanFlatObject(raw []byte) (obj object, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	obj = make(object, 4)
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return obj, skipSpace(raw, i+1) == len(raw)
	}
	for {
		// key
		if i >= len(raw) || raw[i] != '"' {
			return nil, false
		}
		start := i + 1
		i = start
		for i < len(raw) && raw[i] != '"' {
			if b := raw[i]; b < 0x20 || b > 0x7e || b == '\\' {
				return nil, false
			}
			i++
		}
		if i >= len(raw) {
			return nil, false
		}
		key := string(raw[start:i])
		i = skipSpace(raw, i+1)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		end, ok := scanFlatValue(raw, i)
		if !ok {
			return nil, false
		}
		obj[key] = json.RawMessage(raw[i:end:end])
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return obj, skipSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
}

// scanFlatValue returns the end of the value that starts at raw[i]: a
// string with no escapes or control bytes, a number, or a literal.
func scanFlatValue(raw []byte, i int) (int, bool) {
	if i >= len(raw) {
		return 0, false
	}
	switch b := raw[i]; {
	case b == '"':
		for i++; i < len(raw); i++ {
			switch c := raw[i]; {
			case c == '"':
				return i + 1, true
			case c < 0x20 || c == '\\':
				return 0, false
			}
		}
		return 0, false
	case b == '-' || (b >= '0' && b <= '9'):
		return scanNumber(raw, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(raw)-i >= len(lit) && string(raw[i:i+len(lit)]) == lit {
			return i + len(lit), true
		}
	}
	return 0, false
}

// scanNumber returns the end of the JSON number at raw[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(raw []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i
	}
	if raw[i] == '-' {
		i++
	}
	switch {
	case i < len(raw) && raw[i] == '0':
		i++
	case i < len(raw) && raw[i] >= '1' && raw[i] <= '9':
		i = digits(i)
	default:
		return 0, false
	}
	if i < len(raw) && raw[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
