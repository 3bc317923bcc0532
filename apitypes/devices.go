package apitypes

import "encoding/json"

// NewDevice is one device of a batch create.
type NewDevice struct {
	Name string   `json:"name"`
	Mark string   `json:"mark"`
	Tags []string `json:"tags,omitempty"`
}

// CreateDevicesRequest is the body of POST /device/v1/devices: 1 to 1000
// devices.
type CreateDevicesRequest struct {
	Device []NewDevice `json:"device"`
}

// CreateDeviceResult is one device's result of a batch create, in
// request order: code 0 and the device secret when it was created.
type CreateDeviceResult struct {
	DeviceName   string `json:"device_name"`
	Code         int    `json:"code"`
	DeviceSecret string `json:"device_secret,omitempty"`
	Message      string `json:"message,omitempty"`
}

// CreateDevicesAnswer is the answer to POST /device/v1/devices.
type CreateDevicesAnswer struct {
	Resp []CreateDeviceResult `json:"resp"`
}

// BaseInfo is the answer to GET /device/v1/baseinfo (fields in key
// order).
type BaseInfo struct {
	DeviceSecret string   `json:"device_secret"`
	Flag         int      `json:"flag"`
	Tags         []string `json:"tags"`
	TimeActive   int64    `json:"time_active"` // Unix seconds of the first connect, 0 before
	TimeCreate   int64    `json:"time_create"` // Unix seconds
}

// DeviceStatus is the answer to GET /device/v1/status (fields in key
// order). The login times are Unix seconds as strings, "" for never.
type DeviceStatus struct {
	ClientIP       string `json:"client_ip"`
	LastLoginTime  string `json:"last_login_time"`
	LastLogoutTime string `json:"last_logout_time"`
	Status         int    `json:"status"` // 0 offline, 1 online
}

// DeviceTags is the answer to POST /device/v1/tags (fields in key order).
type DeviceTags struct {
	DeviceName string   `json:"device_name"`
	Tags       []string `json:"tags"`
}

// DeviceSummary is one device of GET /admin/v1/apps/{key}/devices, and
// the answer to PATCH /admin/v1/apps/{key}/devices/{name}.
type DeviceSummary struct {
	Name       string   `json:"name"`
	Mark       string   `json:"mark"`
	Flag       int      `json:"flag"`
	Status     int      `json:"status"`
	TimeCreate int64    `json:"time_create"`
	TimeActive int64    `json:"time_active"`
	Tags       []string `json:"tags"`
}

// DevicePage is the answer to GET /admin/v1/apps/{key}/devices: a page of
// devices and the cursor of the next one ("" after the last).
type DevicePage struct {
	Devices    []DeviceSummary `json:"devices"`
	NextCursor string          `json:"next_cursor"`
}

// DeviceDetail is a device as the admin API shows it on its own: the
// listing's fields plus presence, with login times as DeviceStatus gives
// them.
type DeviceDetail struct {
	Name           string   `json:"name"`
	Mark           string   `json:"mark"`
	Flag           int      `json:"flag"`
	Status         int      `json:"status"`
	ClientIP       string   `json:"client_ip"`
	LastLoginTime  string   `json:"last_login_time"`
	LastLogoutTime string   `json:"last_logout_time"`
	TimeCreate     int64    `json:"time_create"`
	TimeActive     int64    `json:"time_active"`
	Tags           []string `json:"tags"`
}

// AdminDevice is the answer to GET /admin/v1/apps/{key}/devices/{name}:
// base info, presence and properties in one.
type AdminDevice struct {
	Device     DeviceDetail    `json:"device"`
	Properties PropertySummary `json:"properties"`
}

// DevicePatch is the body of PATCH /admin/v1/apps/{key}/devices/{name}; a
// field left nil is unchanged, Tags replaces the whole set.
type DevicePatch struct {
	Flag *int      `json:"flag,omitempty"`
	Mark *string   `json:"mark,omitempty"`
	Tags *[]string `json:"tags,omitempty"`
}

// DeletedDevice is the answer to DELETE
// /admin/v1/apps/{key}/devices/{name} (fields in key order).
type DeletedDevice struct {
	Deleted    bool   `json:"deleted"`
	DeviceName string `json:"device_name"`
}

// PropertyValue is one property of a property set: a number or a string.
type PropertyValue struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// SetPropertyRequest is the body of POST /device/v1/property.
type SetPropertyRequest struct {
	SeqNo      int64           `json:"seq_no"`
	DeviceName string          `json:"device_name"`
	Version    int64           `json:"version"`
	Properties []PropertyValue `json:"properties"`
}

// PropertySetAnswer is the answer to POST /device/v1/property: op_code 0
// when the set was applied.
type PropertySetAnswer struct {
	DeviceName string `json:"device_name"`
	OpCode     int    `json:"op_code"`
	OpID       int64  `json:"op_id"`
	OpStatus   string `json:"op_status"`
}

// PropertyInfo is one property of a PropertySummary; a side never set is
// left out.
type PropertyInfo struct {
	Name          string          `json:"name"`
	DesiredValue  json.RawMessage `json:"desired_value,omitempty"`
	DesiredSTime  int64           `json:"desired_stime,omitempty"` // Unix ms
	ReportedValue json.RawMessage `json:"reported_value,omitempty"`
	ReportedSTime int64           `json:"reported_stime,omitempty"` // Unix ms
}

// PropertySummary is the answer to GET /device/v1/property, and the
// properties of an AdminDevice (fields in key order, properties sorted by
// name).
type PropertySummary struct {
	AppVer              string         `json:"app_ver"`
	LastDesiredSTime    int64          `json:"last_desired_stime"`
	LastDesiredVersion  int64          `json:"last_desired_version"`
	LastReportedSTime   int64          `json:"last_reported_stime"`
	LastReportedVersion int64          `json:"last_reported_version"`
	Properties          []PropertyInfo `json:"properties"`
	SDKVer              string         `json:"sdk_ver"`
}
