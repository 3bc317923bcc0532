package restapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
)

// requestBodies names the apitypes type of every route that reads a JSON
// body, by method and route pattern. readBody refuses a field the type
// does not declare (at any depth, but for free-form values such as
// callback.params), so a typo like "tll" is a 400 naming it rather than
// a default silently taken (docs/api.md, "Conventions": devmsg is
// strict). A route that reads a body without an entry here answers 500:
// TestEveryBodyRefusesUnknownFields sends an unknown field to every
// route that takes a body and fails for one missing here.
var requestBodies = map[string]any{
	"POST /device/v1/devices":                        apitypes.CreateDevicesRequest{},
	"POST /device/v1/property":                       apitypes.SetPropertyRequest{},
	"POST /device/v1/tags":                           apitypes.DeviceTags{},
	"POST /msg/v1/msg":                               apitypes.SendRequest{},
	"POST /msg/v1/msgs":                              apitypes.BatchSendRequest{},
	"POST /msg/v1/broadcast":                         apitypes.BroadcastRequest{},
	"POST /cmd/v1/cmd":                               apitypes.CommandRequest{},
	"POST /cmd/v1/cmds":                              apitypes.CommandBatchRequest{},
	"POST /job/v1/jobs":                              apitypes.JobRequest{},
	"POST /job/v1/job/pause":                         apitypes.JobRef{},
	"POST /job/v1/job/resume":                        apitypes.JobRef{},
	"POST /job/v1/job/cancel":                        apitypes.JobRef{},
	"POST /admin/v1/apps":                            apitypes.CreateAppRequest{},
	"POST /admin/v1/apps/:key/master_secret":         apitypes.RotateSecretRequest{},
	"PUT /admin/v1/apps/:key/properties":             apitypes.PropertyModel{},
	"PUT /admin/v1/apps/:key/ratelimits":             apitypes.RateLimitChanges{},
	"PATCH /admin/v1/apps/:key/devices/:name":        apitypes.DevicePatch{},
	"PUT /admin/v1/apps/:key/callback":               apitypes.CallbackChange{},
	"POST /admin/v1/apps/:key/callback/urls":         apitypes.URLRequest{},
	"POST /admin/v1/apps/:key/callback/urls/default": apitypes.URLRequest{},
	"POST /admin/v1/apps/:key/callback/urls/test":    apitypes.URLRequest{},
	"POST /admin/v1/apps/:key/events/webhooks":       apitypes.EventWebhookRequest{},
}

// eachElement lists the element types of arrays whose elements are
// answered one by one (a batch create's devices): a field unknown in one
// of them refuses that element (1003 in its result), not the request, as
// any other fault of one element does. The handler checks them with
// checkFields.
var eachElement = []reflect.Type{reflect.TypeFor[apitypes.NewDevice]()}

// fields is what a JSON object of one apitypes type may hold: each
// field's name and, for an object or an array of objects, what that may
// hold in turn (nil: any value the handler accepts). each marks an array
// of elements answered one by one.
type fields struct {
	names []string // in declaration order, for messages
	sub   map[string]*fields
	each  map[string]bool
}

var fieldsCache sync.Map // reflect.Type → *fields

// fieldsOf returns what an object of type t may hold, nil for a type
// that is not a struct (a map such as RateLimitChanges, json.RawMessage,
// a scalar): its keys or contents are the handler's to check.
func fieldsOf(t reflect.Type) *fields {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	if f, ok := fieldsCache.Load(t); ok {
		return f.(*fields)
	}
	f := &fields{sub: map[string]*fields{}, each: map[string]bool{}}
	for sf := range t.Fields() {
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		f.names = append(f.names, name)
		ft := sf.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 {
			ft = ft.Elem()
			f.each[name] = slices.Contains(eachElement, ft)
		}
		if sub := fieldsOf(ft); sub != nil {
			f.sub[name] = sub
		}
	}
	fieldsCache.Store(t, f)
	return f
}

// bodyFields returns what the body of the request's route may hold, or an
// internal error for a route requestBodies does not name.
func bodyFields(c *gin.Context) (*fields, error) {
	route := c.Request.Method + " " + c.FullPath()
	t, ok := requestBodies[route]
	if !ok {
		return nil, errors.New("restapi: " + route + " reads a JSON body but requestBodies names no type for it")
	}
	return fieldsOf(reflect.TypeOf(t)), nil
}

// checkFields refuses the first field of obj (in sorted order, so the
// answer is stable) that f does not declare, at any depth; path is the
// object's place in the body ("" for the body itself).
func (f *fields) checkFields(obj object, path string) error {
	if f == nil {
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(f.names, k) {
			return errInvalid("unknown field %q in %s: it takes %s", path+k, where(path), strings.Join(f.names, ", "))
		}
		sub := f.sub[k]
		if sub == nil || f.each[k] {
			continue
		}
		if err := sub.checkValue(obj[k], path+k); err != nil {
			return err
		}
	}
	return nil
}

// checkValue checks an object, or each object of an array, at path. A
// value of another kind is left to the handler, whose message says what
// the field must be.
func (f *fields) checkValue(raw json.RawMessage, path string) error {
	switch {
	case len(raw) > 0 && raw[0] == '{':
		obj, err := parseObject(raw, path)
		if err != nil {
			return nil
		}
		return f.checkFields(obj, path+".")
	case len(raw) > 0 && raw[0] == '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil
		}
		for i, e := range elems {
			if err := f.checkValue(e, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// where names the object holding an unknown field in its message.
func where(path string) string {
	if path == "" {
		return "the request body"
	}
	return strings.TrimSuffix(path, ".")
}
