package restapi

import (
	"encoding/json"

	"github.com/devmsg/devmsg/internal/jsonfast"
)

// scanFlatObject reads the bodies most requests send: one JSON object
// whose keys hold UTF-8 text with no escapes and whose values are strings
// with no escapes, numbers, true, false or null, with white space around
// the object allowed. It answers what json.Unmarshal into an object
// answers for such a body (the last of duplicate keys wins), its values
// slices of raw. Any other input, valid or not, makes ok false and the
// caller decodes with encoding/json.
func scanFlatObject(raw []byte) (obj object, ok bool) {
	obj = make(object, 4)
	if !jsonfast.Object(raw, jsonfast.FlatValueEnd, func(key, value []byte) bool {
		obj[string(key)] = json.RawMessage(value)
		return true
	}) {
		return nil, false
	}
	return obj, true
}
