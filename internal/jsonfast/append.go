package jsonfast

import "encoding/json"

// AppendString appends s as json.Marshal encodes it: a Verbatim string
// is copied between quotes; printable ASCII with '"' or '\\' is copied
// with those escaped; a string holding anything else goes through
// json.Marshal, whose escaping (HTML characters, control characters,
// invalid UTF-8, U+2028 and U+2029) is then kept exactly.
func AppendString(b []byte, s string) []byte {
	if Verbatim(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// AppendRaw appends raw JSON as json.Marshal does a json.RawMessage: as
// it is when it is valid, compact, ASCII and holds none of <, > and &;
// through encoding/json (which compacts and escapes it, or fails)
// otherwise.
func AppendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	plain := true
	for _, c := range raw {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain && json.Valid(raw) {
		return append(b, raw...), nil
	}
	out, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}
