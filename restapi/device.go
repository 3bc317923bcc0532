package restapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Limits of spec section 8 (docs/api.md, "Create devices in batch" and
// "Set desired properties"), and the result code of a device name that
// is taken.
const (
	MaxBatchDevices     = 1000
	MaxPropertiesPerSet = 100
	CodeDeviceExists    = 3001
)

// createDevices serves POST /device/v1/devices (spec 4.6).
func (a *API) createDevices(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	if !obj.has("device") {
		return errMissing("device")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(obj["device"], &elems); err != nil {
		return errInvalid("device must be an array of objects")
	}
	if len(elems) == 0 || len(elems) > MaxBatchDevices {
		return errInvalid("device must hold 1 to %d objects, got %d", MaxBatchDevices, len(elems))
	}
	results := make([]apitypes.CreateDeviceResult, len(elems))
	news := make([]devices.NewDevice, 0, len(elems))
	index := make([]int, 0, len(elems)) // news[j] answers results[index[j]]
	for i, raw := range elems {
		d, code, reason := parseNewDevice(raw, i)
		results[i] = apitypes.CreateDeviceResult{DeviceName: d.Name, Code: code, Message: reason}
		if code != 0 {
			continue
		}
		news = append(news, d)
		index = append(index, i)
	}
	if len(news) > 0 {
		created, errs, err := a.devices.Create(c.Request.Context(), currentApp(c).Key, news)
		if err != nil {
			return err
		}
		for j, e := range errs {
			r := &results[index[j]]
			if e != nil {
				r.Code, r.Message = CodeDeviceExists, e.Error()
			} else {
				r.DeviceSecret = created[j].Secret
			}
		}
	}
	return writeJSON(c, apitypes.CreateDevicesAnswer{Resp: results})
}

// parseNewDevice reads one element of a batch create; a non-zero code says
// why it cannot be created.
func parseNewDevice(raw json.RawMessage, i int) (devices.NewDevice, int, string) {
	obj, err := parseObject(raw, "device element")
	if err != nil {
		return devices.NewDevice{}, CodeInvalidParam, "device element must be a JSON object"
	}
	if err := fieldsOf(reflect.TypeFor[apitypes.NewDevice]()).checkFields(obj, fmt.Sprintf("device[%d].", i)); err != nil {
		name, _, _ := obj.stringField("name", false)
		return devices.NewDevice{Name: name}, CodeInvalidParam, err.Error()
	}
	name, ok, err := obj.stringField("name", true)
	if err != nil {
		if ok || obj.has("name") {
			return devices.NewDevice{}, CodeInvalidParam, err.Error()
		}
		return devices.NewDevice{}, CodeMissingParam, err.Error()
	}
	d := devices.NewDevice{Name: name}
	if err := devices.ValidateName(name); err != nil {
		return d, CodeInvalidParam, err.Error()
	}
	mark, _, err := obj.stringField("mark", false)
	if err != nil {
		return d, CodeInvalidParam, err.Error()
	}
	if err := devices.ValidateMark(mark); err != nil {
		return d, CodeInvalidParam, err.Error()
	}
	d.Mark = mark
	tags, _, err := obj.tagsField(fmt.Sprintf("device[%d].tags", i))
	if err != nil {
		return d, CodeInvalidParam, err.Error()
	}
	d.Tags = tags
	return d, 0, ""
}

// deviceParam loads the device named by the device_name query parameter.
func (a *API) deviceParam(c *gin.Context) (store.Device, error) {
	name, ok := c.GetQuery("device_name")
	if !ok {
		return store.Device{}, errMissing("device_name")
	}
	return a.loadDevice(c, currentApp(c).Key, name)
}

func (a *API) loadDevice(c *gin.Context, appKey, name string) (store.Device, error) {
	if name == "" {
		return store.Device{}, errMissing("device_name")
	}
	return a.devices.Get(c.Request.Context(), appKey, name)
}

// baseInfo serves GET /device/v1/baseinfo (spec 4.3).
func (a *API) baseInfo(c *gin.Context) error {
	d, err := a.deviceParam(c)
	if err != nil {
		return err
	}
	return a.writeRead(c, apitypes.BaseInfo{
		DeviceSecret: d.Secret,
		Flag:         d.Flag,
		Tags:         tagsAnswer(d.Tags),
		TimeActive:   d.TimeActive,
		TimeCreate:   d.TimeCreate,
	})
}

// status serves GET /device/v1/status (spec 4.5).
func (a *API) status(c *gin.Context) error {
	d, err := a.deviceParam(c)
	if err != nil {
		return err
	}
	return a.writeRead(c, apitypes.DeviceStatus{
		ClientIP:       d.ClientIP,
		LastLoginTime:  unixString(d.LastLoginTime),
		LastLogoutTime: unixString(d.LastLogoutTime),
		Status:         d.Status,
	})
}

// unixString renders a Unix time as the API's string (docs/api.md, Conventions), "" for never.
func unixString(t int64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatInt(t, 10)
}

// getProperty serves GET /device/v1/property (spec 4.4).
func (a *API) getProperty(c *gin.Context) error {
	name, ok := c.GetQuery("device_name")
	if !ok || name == "" {
		return errMissing("device_name")
	}
	sum, err := a.shadows.Summary(c.Request.Context(), currentApp(c).Key, name)
	if err != nil {
		return err
	}
	return a.writeRead(c, propertySummary(sum))
}

// propertySummary is a device's property summary as the API shows it.
func propertySummary(s shadow.Summary) apitypes.PropertySummary {
	var props []apitypes.PropertyInfo
	if s.Properties != nil {
		props = make([]apitypes.PropertyInfo, len(s.Properties))
		for i, p := range s.Properties {
			props[i] = apitypes.PropertyInfo(p)
		}
	}
	return apitypes.PropertySummary{
		AppVer:              s.AppVer,
		LastDesiredSTime:    s.LastDesiredSTime,
		LastDesiredVersion:  s.LastDesiredVersion,
		LastReportedSTime:   s.LastReportedSTime,
		LastReportedVersion: s.LastReportedVersion,
		Properties:          props,
		SDKVer:              s.SDKVer,
	}
}

// setProperty serves POST /device/v1/property (spec 4.1).
func (a *API) setProperty(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	seqNo, name, err := obj.seqTarget()
	if err != nil {
		return err
	}
	version, _, err := obj.int64Field("version", true)
	if err != nil {
		return err
	}
	names, values, err := parsePropertyItems(obj)
	if err != nil {
		return err
	}
	app := currentApp(c)
	fp := fingerprint("POST /device/v1/property", obj)
	if name == "" {
		return a.seqFailed(c, app.Key, seqNo, fp, errMissing("device_name"))
	}
	req := shadow.SetRequest{Device: name, Version: version, Names: names, Values: values}
	res, err := a.shadows.SetDesired(c.Request.Context(), app, req, seqNo, func(r shadow.SetResult) *store.SeqEntry {
		return a.seqEntry(fp, mustJSON(apitypes.PropertySetAnswer(r)))
	})
	if err != nil {
		return a.seqFailed(c, app.Key, seqNo, fp, err)
	}
	c.Data(200, "application/json", mustJSON(apitypes.PropertySetAnswer(res)))
	return nil
}

// parsePropertyItems reads the properties array of a property set (spec
// 2.2): names in request order and each value as raw JSON.
func parsePropertyItems(obj object) ([]string, map[string]json.RawMessage, error) {
	if !obj.has("properties") {
		return nil, nil, errMissing("properties")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(obj["properties"], &items); err != nil {
		return nil, nil, errInvalid("properties must be an array of {name, value} objects")
	}
	if len(items) == 0 || len(items) > MaxPropertiesPerSet {
		return nil, nil, errInvalid("properties must hold 1 to %d items, got %d", MaxPropertiesPerSet, len(items))
	}
	names := make([]string, 0, len(items))
	values := make(map[string]json.RawMessage, len(items))
	for i, raw := range items {
		item, err := parseObject(raw, fmt.Sprintf("properties[%d]", i))
		if err != nil {
			return nil, nil, err
		}
		field := fmt.Sprintf("properties[%d].name", i)
		if !item.has("name") {
			return nil, nil, errMissing(field)
		}
		var name string
		if err := json.Unmarshal(item["name"], &name); err != nil {
			return nil, nil, errInvalid("%s must be a string", field)
		}
		if !validJSONText(item["name"]) {
			return nil, nil, errNotText(field)
		}
		if err := shadow.ValidateName(name); err != nil {
			return nil, nil, errInvalid("%s: %v", field, err)
		}
		if _, dup := values[name]; dup {
			return nil, nil, errInvalid("%s: %q appears twice", field, name)
		}
		v, ok := item["value"]
		if !ok || string(v) == "null" {
			return nil, nil, errMissing(fmt.Sprintf("properties[%d].value", i))
		}
		if !shadow.IsNumberOrString(v) {
			return nil, nil, errInvalid("properties[%d].value must be a number or a string", i)
		}
		if !validJSONText(v) {
			return nil, nil, errNotText(fmt.Sprintf("properties[%d].value", i))
		}
		names = append(names, name)
		values[name] = compact(v)
	}
	return names, values, nil
}
