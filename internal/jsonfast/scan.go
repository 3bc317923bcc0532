package jsonfast

import "unicode/utf8"

// MaxDepth is how deeply ValueEnd follows nested objects and arrays;
// deeper values are left to encoding/json.
const MaxDepth = 64

// SkipSpace returns the index of the first byte of b at or after i that is
// not JSON white space (space, tab, line feed, carriage return), or len(b).
func SkipSpace(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return i
		}
	}
	return i
}

// PlainStringEnd returns the index after the string literal that starts
// at b[i] (a quote) when it holds no escape and no control byte, and -1
// otherwise. Its bytes need not be UTF-8: encoding/json accepts such a
// literal (and decodes the bytes that are not UTF-8 to U+FFFD).
func PlainStringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	return plainEnd(b, i+1)
}

// PlainTextEnd is PlainStringEnd for a literal whose text must be UTF-8
// too: one that json.Unmarshal decodes to the bytes between its quotes.
func PlainTextEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	j := i + 1
	for j < len(b) && asciiPlainByte[b[j]] {
		j++
	}
	switch {
	case j >= len(b):
		return -1
	case b[j] == '"':
		return j + 1
	case b[j] < utf8.RuneSelf: // a backslash or a control byte
		return -1
	}
	end := plainEnd(b, j) // the rest of the text, from its first byte that is not ASCII
	if end < 0 || !utf8.Valid(b[j:end-1]) {
		return -1
	}
	return end
}

// plainEnd returns the index after the closing quote of a plain string
// whose text goes on at b[j], or -1.
func plainEnd(b []byte, j int) int {
	for j < len(b) && plainByte[b[j]] {
		j++
	}
	if j < len(b) && b[j] == '"' {
		return j + 1
	}
	return -1
}

// plainByte, asciiPlainByte and verbatimByte tell the bytes that may
// stand as they are in the text of a plain string (any but the quote, the
// backslash and the control bytes), of a plain string that is ASCII, and
// of a Verbatim one (printable ASCII but for the quote, the backslash, <,
// > and &).
var plainByte, asciiPlainByte, verbatimByte = func() (plain, ascii, verbatim [256]bool) {
	for c := 0x20; c < 256; c++ {
		plain[c] = c != '"' && c != '\\'
		ascii[c] = plain[c] && c < utf8.RuneSelf
		verbatim[c] = ascii[c] && c != 0x7f && c != '<' && c != '>' && c != '&'
	}
	return plain, ascii, verbatim
}()

// PlainText returns the text between the quotes of lit when lit is one
// string literal PlainTextEnd takes: exactly what json.Unmarshal decodes
// it to. ok is false for anything else.
func PlainText(lit []byte) (text []byte, ok bool) {
	if PlainTextEnd(lit, 0) != len(lit) {
		return nil, false
	}
	return lit[1 : len(lit)-1], true
}

// Verbatim reports whether json.Marshal writes the string s as s itself
// between quotes: whether s is printable ASCII other than the quote and
// backslash, which it escapes, and <, > and &, which it escapes for HTML.
// It is false for some strings json.Marshal does write as they are (DEL,
// UTF-8 text): those take encoding/json's way, which gives the same.
func Verbatim[T ~string | ~[]byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if !verbatimByte[s[i]] {
			return false
		}
	}
	return true
}

// VerbatimStringEnd returns the index after the string literal that
// starts at b[i] (a quote) when its text is Verbatim, one json.Marshal
// writes back as the same literal, and -1 otherwise.
func VerbatimStringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	j := i + 1
	for j < len(b) && verbatimByte[b[j]] {
		j++
	}
	if j < len(b) && b[j] == '"' {
		return j + 1
	}
	return -1
}

// StringEnd returns the index after the string literal that starts at
// b[i] (a quote), escapes and all, or -1 when it is not a well-formed
// JSON string: a control byte, an escape other than \" \\ \/ \b \f \n \r
// \t and \u with four hex digits, or no closing quote.
func StringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case plainByte[c]:
		case c == '"':
			return j + 1
		case c == '\\':
			if j = escapeEnd(b, j); j < 0 {
				return -1
			}
			j-- // the loop steps past the escape's last byte
		default: // a control byte
			return -1
		}
	}
	return -1
}

// escapeEnd returns the index after the escape that starts at b[i] (a
// backslash), or -1 when it is not one JSON allows.
func escapeEnd(b []byte, i int) int {
	if i+1 >= len(b) {
		return -1
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if i+6 > len(b) {
			return -1
		}
		for _, c := range b[i+2 : i+6] {
			if !isHex(c) {
				return -1
			}
		}
		return i + 6
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// NumberEnd returns the index after the JSON number that starts at b[i],
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, the longest one there,
// or -1 when none starts there.
func NumberEnd(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digitsEnd(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digitsEnd(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digitsEnd(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// digitsEnd returns the index after the decimal digits from b[i] on.
func digitsEnd(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// LiteralEnd returns the index after the true, false or null that starts
// at b[i], or -1.
func LiteralEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	var lit string
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	case 'n':
		lit = "null"
	default:
		return -1
	}
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// FlatValueEnd returns the index after the value that starts at b[i] when
// it is a plain string (see PlainStringEnd), a number, true, false or
// null, and -1 otherwise.
func FlatValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return PlainStringEnd(b, i)
	case c == '-' || c >= '0' && c <= '9':
		return NumberEnd(b, i)
	}
	return LiteralEnd(b, i)
}

// ValueEnd returns the index after the JSON value that starts at b[i],
// stepping over nested objects and arrays and strings with escapes, or -1
// when none does or it is nested deeper than MaxDepth.
func ValueEnd(b []byte, i int) int {
	return valueEnd(b, i, 0)
}

func valueEnd(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		if depth >= MaxDepth {
			return -1
		}
		return compositeEnd(b, i, depth+1)
	}
	return FlatValueEnd(b, i)
}

// compositeEnd returns the index after the object or array that starts
// at b[i], its elements at the given depth, or -1.
func compositeEnd(b []byte, i, depth int) int {
	isObject := b[i] == '{'
	closing := byte(']')
	if isObject {
		closing = '}'
	}
	j := SkipSpace(b, i+1)
	if j < len(b) && b[j] == closing {
		return j + 1
	}
	for {
		if isObject {
			if j = memberValue(b, j); j < 0 {
				return -1
			}
		}
		if j = valueEnd(b, j, depth); j < 0 {
			return -1
		}
		switch j = SkipSpace(b, j); {
		case j >= len(b):
			return -1
		case b[j] == closing:
			return j + 1
		case b[j] != ',':
			return -1
		}
		j = SkipSpace(b, j+1)
	}
}

// memberValue steps over the key and colon of the object member at b[i]
// and the white space after them, returning the index of its value, or -1.
func memberValue(b []byte, i int) int {
	if i = StringEnd(b, i); i < 0 {
		return -1
	}
	if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return SkipSpace(b, i+1)
}

// PlainArrayEnd returns the index after the array that starts at b[i]
// when each of its elements is a plain string (see PlainStringEnd), and
// -1 otherwise.
func PlainArrayEnd(b []byte, i int) int {
	end, _, _ := StringArray(b, i, PlainStringEnd, nil)
	return end
}

// StringArray returns the index after the array that starts at b[i] when
// each of its elements is a string literal elemEnd takes (PlainStringEnd,
// PlainTextEnd, VerbatimStringEnd), and -1 otherwise; n is how many
// elements it has and spaced whether white space stands in it. each, when
// not nil, is called with the offsets of each element's text between its
// quotes, in order, as the scan goes (so also for an array it then
// refuses).
func StringArray(b []byte, i int, elemEnd func(b []byte, i int) int, each func(start, end int)) (end, n int, spaced bool) {
	if i >= len(b) || b[i] != '[' {
		return -1, 0, false
	}
	j := SkipSpace(b, i+1)
	spaced = j != i+1
	if j < len(b) && b[j] == ']' {
		return j + 1, 0, spaced
	}
	for {
		end := elemEnd(b, j)
		if end < 0 {
			return -1, 0, false
		}
		if each != nil {
			each(j+1, end-1)
		}
		n++
		if j = SkipSpace(b, end); j != end {
			spaced = true
		}
		switch {
		case j >= len(b):
			return -1, 0, false
		case b[j] == ']':
			return j + 1, n, spaced
		case b[j] != ',':
			return -1, 0, false
		}
		if end, j = j+1, SkipSpace(b, j+1); j != end {
			spaced = true
		}
	}
}

// Object walks b, which must be one JSON object with only white space
// around it, calling fn with each member's key text and raw value (capped
// at its end), in order. It reports whether b was such an object whose
// keys are plain strings with UTF-8 text (so each key is the text
// encoding/json decodes), whose every value's end valueEnd found (-1: not
// one the caller reads), and for whose every member fn returned true.
func Object(b []byte, valueEnd func(b []byte, i int) int, fn func(key, value []byte) bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return SkipSpace(b, i+1) == len(b)
	}
	for {
		end := PlainTextEnd(b, i)
		if end < 0 {
			return false
		}
		key := b[i+1 : end-1]
		if i = SkipSpace(b, end); i >= len(b) || b[i] != ':' {
			return false
		}
		i = SkipSpace(b, i+1)
		if end = valueEnd(b, i); end < 0 || !fn(key, b[i:end:end]) {
			return false
		}
		switch i = SkipSpace(b, end); {
		case i >= len(b):
			return false
		case b[i] == '}':
			return SkipSpace(b, i+1) == len(b)
		case b[i] != ',':
			return false
		}
		i = SkipSpace(b, i+1)
	}
}
