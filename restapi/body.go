package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/internal/jsonfast"
)

// MaxBodyBytes bounds every request body: 1 MiB, as docs/api.md
// (Conventions) promises; a larger one is refused with 400 (1003).
const MaxBodyBytes = 1 << 20

// object is a decoded JSON object whose fields are read one by one, so each
// error names its field.
type object map[string]json.RawMessage

// readBody reads the request body and decodes it as one JSON object,
// refusing a field that the route's type in requestBodies does not
// declare.
func readBody(c *gin.Context) (object, error) {
	// A body declared too large is refused before any of it is read, so
	// net/http sends no 100 Continue: a client that waits for one (curl
	// does above 1 MiB) gets the 400 instead of sending the body into a
	// connection closed behind the answer, which it often lost.
	if c.Request.ContentLength > MaxBodyBytes {
		discardBody(c)
		return nil, errInvalid("request body exceeds %d bytes", MaxBodyBytes)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			discardBody(c)
			return nil, errInvalid("request body exceeds %d bytes", MaxBodyBytes)
		}
		return nil, errInvalid("read request body: %v", err)
	}
	obj, err := parseObject(raw, "request body")
	if err != nil {
		return nil, err
	}
	f, err := bodyFields(c)
	if err != nil {
		return nil, err
	}
	return obj, f.checkFields(obj, "")
}

// maxDiscardBytes bounds what discardBody reads of a body refused as too
// large.
const maxDiscardBytes = 16 << 20

// discardBody reads and drops the rest of a body refused as too large, up
// to maxDiscardBytes, before the 400 is written. A client that sends its
// whole body before it reads the answer (a chunked body has no length to
// refuse it by) would otherwise be sending into a connection closed with
// its bytes unread, which the kernel resets, and lose the 400 with it. A
// client waiting for 100 Continue has sent nothing, and is sent nothing to
// go on. The connection is closed after the answer either way.
func discardBody(c *gin.Context) {
	c.Header("Connection", "close")
	if strings.EqualFold(c.Request.Header.Get("Expect"), "100-continue") {
		return
	}
	_, _ = io.CopyN(io.Discard, c.Request.Body, maxDiscardBytes)
}

// parseObject decodes raw as exactly one JSON object.
func parseObject(raw []byte, what string) (object, error) {
	// One value and only white space after it: what the decoder below
	// accepts, without its buffer (and for a flat object, without
	// reflection). Every error takes the decoder's way, so
	// the messages stay those of the decoder.
	if obj, ok := scanFlatObject(raw); ok {
		return obj, nil
	}
	var obj object
	if err := json.Unmarshal(raw, &obj); err == nil && obj != nil {
		return obj, nil
	}
	return decodeObject(raw, what)
}

// decodeObject reads raw as one JSON object with encoding/json's decoder,
// whose errors name what is wrong: parseObject's path for what its fast
// reads do not take.
func decodeObject(raw []byte, what string) (object, error) {
	var obj object
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&obj); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, errInvalid("%s must be a JSON object, not %s", what, typeErr.Value)
		}
		return nil, errInvalid("%s is not a valid JSON object: %v", what, err)
	}
	if obj == nil {
		return nil, errInvalid("%s must be a JSON object", what)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errInvalid("%s has data after the JSON object", what)
	}
	return obj, nil
}

// has reports whether the field is present and not null.
func (o object) has(field string) bool {
	v, ok := o[field]
	return ok && string(v) != "null"
}

// int64Field reads an integer field; prefix is prepended to the field name
// in messages (for nested fields).
func (o object) int64Field(field string, required bool) (int64, bool, error) {
	if !o.has(field) {
		if required {
			return 0, false, errMissing(field)
		}
		return 0, false, nil
	}
	n, err := parseInt(o[field])
	if errors.Is(err, errIntRange) {
		return 0, false, errInvalid("%s is out of range: %s is not an integer from %d to %d", field, o[field], int64(math.MinInt64), int64(math.MaxInt64))
	}
	if err != nil {
		return 0, false, errInvalid("%s must be an integer", field)
	}
	return n, true, nil
}

// errIntRange is parseInt's error for an integral number outside int64.
var errIntRange = errors.New("integer out of int64 range")

// parseInt accepts a JSON number with an integral value in int64 range,
// including forms like 1e3 or 5.0. An integral value outside that range
// fails with errIntRange.
func parseInt(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || raw[0] == '"' {
		return 0, errors.New("not a number")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, errIntRange
	}
	var num json.Number
	if err := json.Unmarshal(raw, &num); err != nil {
		return 0, err
	}
	if num == "" { // null
		return 0, errors.New("not a number")
	}
	return decimalInt(string(num))
}

// decimal is a JSON number as written, exactly: digits (no leading or
// trailing zeros; "" for zero) times ten to exp.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// parseDecimal reads a JSON number literal without rounding it. An
// exponent beyond an int32 is clamped to its bound and reported as not
// exact (ok false): a huge exponent costs nothing.
func parseDecimal(num string) (d decimal, exact bool) {
	exact = true
	d.neg = strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	mant, exp := num, 0
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		mant = num[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(num[i+1:], "+"))
		if err != nil || e > math.MaxInt32 || e < math.MinInt32 {
			exact = false
			e = math.MaxInt32
			if strings.HasPrefix(num[i+1:], "-") {
				e = math.MinInt32
			}
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	all := strings.TrimLeft(whole+frac, "0")
	d.digits = strings.TrimRight(all, "0")
	d.exp = exp - len(frac) + (len(all) - len(d.digits))
	if d.digits == "" {
		d.neg, d.exp = false, 0
	}
	return d, exact
}

// String spells d exactly, in a form strconv.FormatFloat never writes
// (no "+" in the exponent, none of its leading zeros).
func (d decimal) String() string {
	sign := ""
	if d.neg {
		sign = "-"
	}
	if d.digits == "" {
		return "0"
	}
	return sign + d.digits + "e" + strconv.Itoa(d.exp)
}

// decimalInt reads a JSON number in fraction or exponent form (5.0,
// 5e0, 1.2e3) as the integer it is, exactly: through a float64,
// 9007199254740993.0 would become its neighbour and 5.00000000000000000001
// an integer. The digits are shifted by the exponent as text, so a huge
// exponent costs nothing.
func decimalInt(num string) (int64, error) {
	d, _ := parseDecimal(num)
	if d.digits == "" {
		return 0, nil
	}
	if d.exp < 0 {
		return 0, errors.New("not an integer")
	}
	if len(d.digits)+d.exp > 19 {
		return 0, errIntRange
	}
	text := d.digits + strings.Repeat("0", d.exp)
	if d.neg {
		text = "-" + text
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, errIntRange
	}
	return n, nil
}

func (o object) stringField(field string, required bool) (string, bool, error) {
	if !o.has(field) {
		if required {
			return "", false, errMissing(field)
		}
		return "", false, nil
	}
	if s, ok := plainString(o[field]); ok {
		return s, true, nil
	}
	var s string
	if err := json.Unmarshal(o[field], &s); err != nil {
		return "", false, errInvalid("%s must be a string", field)
	}
	// json.Unmarshal turns bytes that are not UTF-8, and escaped halves of
	// a surrogate pair, into U+FFFD: the text would change unseen.
	if !validJSONText(o[field]) {
		return "", false, errNotText(field)
	}
	return s, true, nil
}

func (o object) boolField(field string, required bool) (bool, bool, error) {
	if !o.has(field) {
		if required {
			return false, false, errMissing(field)
		}
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(o[field], &b); err != nil {
		return false, false, errInvalid("%s must be true or false", field)
	}
	return b, true, nil
}

// plainString returns the text of a JSON string literal that holds only
// printable ASCII with nothing to escape: no backslash, no quote, and none
// of the <, > and & that json.Marshal escapes (jsonfast.Verbatim). Such a
// literal decodes to its bytes between the quotes and encodes back to
// itself, so callers skip encoding/json for it; ok is false for every
// other value.
func plainString(raw json.RawMessage) (s string, ok bool) {
	if !isPlainString(raw) {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}

// isPlainString reports whether plainString takes raw.
func isPlainString(raw json.RawMessage) bool {
	return jsonfast.VerbatimStringEnd(raw, 0) == len(raw)
}

// canonicalValue re-encodes one JSON value so two values that mean the
// same compare equal: objects get sorted keys, strings one escaping, and
// insignificant whitespace goes. Numbers and literals keep their bytes.
func canonicalValue(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return raw
	}
	switch raw[0] {
	case '"':
		if isPlainString(raw) {
			return raw // json.Marshal would write the same bytes
		}
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return raw
		}
		b, _ := json.Marshal(str)
		return b
	case '[':
		if b, ok := canonicalPlainArray(raw); ok {
			return b
		}
		return canonicalComposite(raw)
	case '{':
		if b, ok := canonicalFlatObject(raw); ok {
			return b
		}
		return canonicalComposite(raw)
	case 't', 'f', 'n':
		return raw
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		var buf [20]byte
		if bytes.Equal(strconv.AppendInt(buf[:0], n, 10), raw) {
			return raw // already how normalizeNumber spells it
		}
	}
	return []byte(normalizeNumber(string(raw)))
}

// normalizeNumber spells a JSON number one way, so 1, 1.0 and 1e0 (the
// same number) compare equal, and two different numbers never do:
// integers in int64 range in decimal, numbers that are exactly the
// shortest float64 form of themselves (0.1, 1e+20) in that form, any
// other in decimal.String's exact form (digits and an exponent), so
// 12345678901234567890123 and ...124, the same float64, stay apart. A
// literal whose exponent is beyond an int32, or that is not a number, is
// kept as written.
func normalizeNumber(lit string) string {
	if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	if n, err := decimalInt(lit); err == nil {
		return strconv.FormatInt(n, 10)
	}
	if lit == "" || (lit[0] != '-' && (lit[0] < '0' || lit[0] > '9')) || !json.Valid([]byte(lit)) {
		return lit // not a number
	}
	d, exact := parseDecimal(lit)
	if !exact {
		return lit
	}
	if f, err := strconv.ParseFloat(lit, 64); err == nil {
		g := strconv.FormatFloat(f, 'g', -1, 64)
		if gd, _ := parseDecimal(g); gd == d {
			return g
		}
	}
	return d.String()
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return json.Number(normalizeNumber(string(x)))
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	}
	return v
}

// compact strips insignificant whitespace from a valid JSON value.
func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}

// seqTarget reads the seq_no and device_name that every writing call
// of spec section 4 carries.
func (o object) seqTarget() (seqNo int64, device string, err error) {
	if seqNo, _, err = o.int64Field("seq_no", true); err != nil {
		return 0, "", err
	}
	device, _, err = o.stringField("device_name", true)
	return seqNo, device, err
}

// errNotText refuses a field whose JSON holds text that is not UTF-8.
func errNotText(field string) error {
	return errInvalid("%s must be valid UTF-8 text (it holds bytes that are not UTF-8 or an unpaired \\u surrogate escape)", field)
}

// validJSONText reports whether a JSON value (a string literal, or an
// object or array holding strings) is valid UTF-8 and escapes no lone
// UTF-16 surrogate: whether it decodes without U+FFFD standing in for
// something else.
func validJSONText(raw json.RawMessage) bool {
	if !utf8.Valid(raw) {
		return false
	}
	// After a valid Unmarshal every backslash starts an escape.
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		i += 4
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high half: a low half must follow
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return false
			}
			if lo := hex4(raw[i+3:]); lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		case utf16.IsSurrogate(r): // a low half alone
			return false
		}
	}
	return true
}

// hex4 reads the four hex digits of a \u escape json.Unmarshal accepted.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(n)
}
