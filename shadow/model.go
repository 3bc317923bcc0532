package shadow

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Operation codes of a property set or report (docs/api.md, "Set desired
// properties"; docs/device-protocol.md, "Reporting properties").
const (
	CodeOK               = 0
	CodeVersionInvalid   = 6003
	CodePropertyNotFound = 6007
	CodeTypeCheckFail    = 6008
	CodeValueOutOfRange  = 6009
)

// CodeText returns the op_status text of an operation code.
func CodeText(code int) string {
	switch code {
	case CodeOK:
		return "ok"
	case CodeVersionInvalid:
		return "version invalid"
	case CodePropertyNotFound:
		return "property not found"
	case CodeTypeCheckFail:
		return "type check fail"
	case CodeValueOutOfRange:
		return "value exceeds range"
	}
	return "unknown"
}

// DefaultMaxStringBytes limits string values that the model does not limit.
const DefaultMaxStringBytes = 1024

// CheckError is a property that failed the model check.
type CheckError struct {
	Code     int
	Property string
	Reason   string
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("property %q: %s", e.Property, e.Reason)
}

// Check validates property values (raw JSON numbers or strings) against
// the app's model. With an empty model any name is accepted and strings
// are limited to DefaultMaxStringBytes. The first failing property, in
// names order, is returned; nil means every value passes.
func Check(model []store.PropertyDef, names []string, values map[string]json.RawMessage) *CheckError {
	defs := make(map[string]store.PropertyDef, len(model))
	for _, d := range model {
		defs[d.Name] = d
	}
	for _, name := range names {
		v := values[name]
		def, ok := defs[name]
		if !ok {
			if len(model) > 0 {
				return &CheckError{CodePropertyNotFound, name, "not in the app's property model"}
			}
			if s, isStr := stringValue(v); isStr {
				if len(s) > DefaultMaxStringBytes {
					return &CheckError{CodeValueOutOfRange, name, fmt.Sprintf("string longer than %d bytes", DefaultMaxStringBytes)}
				}
			} else if f, err := strconv.ParseFloat(string(v), 64); err != nil || math.IsInf(f, 0) {
				// 1e400 is valid JSON but no client can read it back as a number.
				return &CheckError{CodeValueOutOfRange, name, "number out of range"}
			}
			continue
		}
		if err := checkDef(def, v); err != nil {
			return err
		}
	}
	return nil
}

func checkDef(def store.PropertyDef, v json.RawMessage) *CheckError {
	s, isStr := stringValue(v)
	switch def.Type {
	case store.TypeString:
		if !isStr {
			return &CheckError{CodeTypeCheckFail, def.Name, "want a string"}
		}
		limit := DefaultMaxStringBytes
		if def.MaxLength != nil {
			limit = *def.MaxLength
		}
		if len(s) > limit {
			return &CheckError{CodeValueOutOfRange, def.Name, fmt.Sprintf("string longer than %d bytes", limit)}
		}
		return nil
	case store.TypeInt, store.TypeDouble:
		if isStr {
			return &CheckError{CodeTypeCheckFail, def.Name, "want a number"}
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return &CheckError{CodeValueOutOfRange, def.Name, "number out of range"}
		}
		if def.Type == store.TypeInt {
			if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
				if f != math.Trunc(f) {
					return &CheckError{CodeTypeCheckFail, def.Name, "want an integer"}
				}
				if f < math.MinInt64 || f >= math.MaxInt64 {
					return &CheckError{CodeValueOutOfRange, def.Name, "integer out of int64 range"}
				}
			}
		}
		if def.Min != nil && f < *def.Min {
			return &CheckError{CodeValueOutOfRange, def.Name, fmt.Sprintf("below minimum %v", *def.Min)}
		}
		if def.Max != nil && f > *def.Max {
			return &CheckError{CodeValueOutOfRange, def.Name, fmt.Sprintf("above maximum %v", *def.Max)}
		}
		return nil
	}
	return &CheckError{CodeTypeCheckFail, def.Name, "unknown model type " + def.Type}
}

// stringValue decodes v if it is a JSON string.
func stringValue(v json.RawMessage) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// ValidateModel checks a property model an app owner submits; a
// *errdefs.InvalidError names the first entry that breaks a rule.
func ValidateModel(model []store.PropertyDef) error {
	seen := make(map[string]bool, len(model))
	for i, d := range model {
		if err := ValidateName(d.Name); err != nil {
			return invalid(fmt.Sprintf("properties[%d].name", i), "%v", err)
		}
		if seen[d.Name] {
			return invalid(fmt.Sprintf("properties[%d].name", i), "%q appears twice", d.Name)
		}
		seen[d.Name] = true
		switch d.Type {
		case store.TypeInt, store.TypeDouble:
			if d.MaxLength != nil {
				return invalid(fmt.Sprintf("properties[%d].max_length", i), "only for type string")
			}
			if d.Min != nil && d.Max != nil && *d.Min > *d.Max {
				return invalid(fmt.Sprintf("properties[%d]", i), "min %v is greater than max %v", *d.Min, *d.Max)
			}
		case store.TypeString:
			if d.Min != nil || d.Max != nil {
				return invalid(fmt.Sprintf("properties[%d]", i), "min and max are only for int and double")
			}
			if d.MaxLength != nil && (*d.MaxLength < 0 || *d.MaxLength > 65536) {
				return invalid(fmt.Sprintf("properties[%d].max_length", i), "%d is outside 0..65536", *d.MaxLength)
			}
		default:
			return invalid(fmt.Sprintf("properties[%d].type", i), "%q is not int, double or string", d.Type)
		}
	}
	if len(model) > 1000 {
		return invalid("properties", "at most 1000 in a model, got %d", len(model))
	}
	return nil
}

// invalid is the *errdefs.InvalidError "field: reason" of a model entry.
func invalid(field, format string, args ...any) error {
	return &errdefs.InvalidError{Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// MaxNameLen bounds a property name, in bytes.
const MaxNameLen = 128

// ValidateName checks a property name. Any name is accepted when an app
// has no property model, so the only rules are the ones storage and display
// need: 1 to 128 bytes of UTF-8 without control characters.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("length must be 1 to %d bytes", MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q has a control character", name)
		}
	}
	return nil
}
