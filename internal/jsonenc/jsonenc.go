// Package jsonenc writes JSON by hand where json.Marshal's reflection
// costs too much: the batch answers and the device payloads of every
// message of a fan-out.
package jsonenc

import "encoding/json"

// AppendString appends s as json.Marshal encodes it: printable ASCII
// is copied, with '"' and '\\' escaped; a string holding anything else
// goes through json.Marshal, whose escaping (HTML characters, control
// characters, invalid UTF-8, U+2028 and U+2029) is then kept exactly.
func AppendString(b []byte, s string) []byte {
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
