package restapi

import (
	"encoding/json"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/devices"
)

// stringsField reads the optional array of strings at key; ok says
// whether it was there (null counts as absent). field names it in errors.
func (o object) stringsField(key, field string) ([]string, bool, error) {
	raw, ok := o[key]
	if !ok || string(raw) == "null" {
		return nil, false, nil
	}
	out, ok := stringArray(raw)
	if !ok {
		return nil, false, errInvalid("%s must be an array of strings", field)
	}
	if !validJSONText(raw) {
		return nil, false, errNotText(field)
	}
	if out == nil {
		out = []string{}
	}
	return out, true, nil
}

// stringArray decodes raw as a JSON array of strings. Unlike
// json.Unmarshal into []string it refuses null elements, which would
// otherwise pass as "" and be blamed on the value rather than the type.
func stringArray(raw json.RawMessage) ([]string, bool) {
	if out, ok := plainStrings(raw); ok {
		return out, true
	}
	return decodeStringArray(raw)
}

// decodeStringArray is stringArray through encoding/json, for what
// plainStrings does not take.
func decodeStringArray(raw json.RawMessage) ([]string, bool) {
	var ptrs []*string
	if err := json.Unmarshal(raw, &ptrs); err != nil || ptrs == nil {
		return nil, false
	}
	out := make([]string, len(ptrs))
	for i, p := range ptrs {
		if p == nil {
			return nil, false
		}
		out[i] = *p
	}
	return out, true
}

// tagsField reads and normalizes the optional tags list (0 to 20 tags of
// 1 to 64 letters, digits and - _ . : @, a set; see docs/api.md#tags);
// field names it in errors.
func (o object) tagsField(field string) ([]string, bool, error) {
	raw, ok, err := o.stringsField("tags", field)
	if err != nil || !ok {
		return nil, ok, err
	}
	tags, err := devices.NormalizeTags(field, raw)
	return tags, true, err
}

// tagsAnswer is a device's tags as the API shows them: [] for none.
func tagsAnswer(tags []string) []string {
	if tags == nil {
		return []string{}
	}
	return tags
}

// setTags serves POST /device/v1/tags (docs/api.md#tags): the device's
// tags become the given set.
func (a *API) setTags(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	name, _, err := obj.stringField("device_name", true)
	if err != nil {
		return err
	}
	if name == "" {
		return errMissing("device_name")
	}
	if !obj.has("tags") {
		return errMissing("tags")
	}
	tags, _, err := obj.tagsField("tags")
	if err != nil {
		return err
	}
	if tags == nil {
		tags = []string{}
	}
	d, err := a.devices.SetTags(c.Request.Context(), currentApp(c).Key, name, tags)
	if err != nil {
		return err
	}
	return writeJSON(c, gin.H{"device_name": d.Name, "tags": tagsAnswer(d.Tags)})
}
