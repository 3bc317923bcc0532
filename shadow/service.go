package shadow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Store is what the Service needs of the store.
type Store interface {
	GetDevice(ctx context.Context, appKey, name string) (store.Device, error)
	GetShadow(ctx context.Context, appKey, name string) (store.Shadow, error)
	SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error)
	PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error
}

// IDs hands out operation ids (*idgen.Generator is one).
type IDs interface{ Next() int64 }

// Notifier hears of a stored desired change that a connected device must
// learn of (*mqttapi.API is one).
type Notifier interface {
	DesiredChanged(ctx context.Context, appKey, device string, sh store.Shadow)
}

// Service holds the rules of the property operations an app makes: set
// desired values and read the property summary. Device reports are
// applied by Sync.
type Service struct {
	store  Store
	ids    IDs
	notify Notifier
	now    func() time.Time
}

// NewService returns a Service on st that numbers operations with ids and
// tells notify of desired changes (nil: nobody is told).
func NewService(st Store, ids IDs, notify Notifier) *Service {
	if notify == nil {
		notify = silent{}
	}
	return &Service{store: st, ids: ids, notify: notify, now: time.Now}
}

type silent struct{}

func (silent) DesiredChanged(context.Context, string, string, store.Shadow) {}

// SetRequest is a parsed property set (docs/api.md, "Set desired
// properties").
type SetRequest struct {
	Device string
	// Version must equal the shadow's LastDesiredVersion.
	Version int64
	// Names lists the properties in request order, which decides the
	// one reported when several fail the model.
	Names  []string
	Values map[string]json.RawMessage
}

// SetResult is the answer to a property set (docs/api.md, "Set desired
// properties").
type SetResult struct {
	DeviceName string `json:"device_name"`
	OpCode     int    `json:"op_code"`
	OpID       int64  `json:"op_id"`
	OpStatus   string `json:"op_status"`
}

// SetDesired applies req for app, recording under seqNo the entry seqFor
// builds from the result, atomically with the change. A set refused by
// the app's property model or by the version is a result, not an error:
// its op_code says why, and it is recorded all the same. Errors: a
// *errdefs.NotFoundError for an unknown device, store.ErrSeqUsed (wrapped)
// when seqNo is already recorded, else the store's.
func (s *Service) SetDesired(ctx context.Context, app store.App, req SetRequest, seqNo int64, seqFor func(SetResult) *store.SeqEntry) (SetResult, error) {
	if _, err := s.store.GetDevice(ctx, app.Key, req.Device); err != nil {
		return SetResult{}, deviceErr(req.Device, err)
	}
	res := SetResult{DeviceName: req.Device, OpID: s.ids.Next()}
	if cerr := Check(app.Properties, req.Names, req.Values); cerr != nil {
		return s.record(ctx, app.Key, seqNo, res.with(cerr.Code), seqFor)
	}
	res = res.with(CodeOK)
	u := store.DesiredUpdate{AppKey: app.Key, DeviceName: req.Device, Version: req.Version, Properties: req.Values, Time: s.now().UnixMilli()}
	sh, err := s.store.SetDesired(ctx, u, seqNo, seqFor(res))
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return s.record(ctx, app.Key, seqNo, res.with(CodeVersionInvalid), seqFor)
	case err != nil:
		return SetResult{}, deviceErr(req.Device, err)
	}
	s.notify.DesiredChanged(ctx, app.Key, req.Device, sh)
	return res, nil
}

func (r SetResult) with(code int) SetResult {
	r.OpCode, r.OpStatus = code, CodeText(code)
	return r
}

// record stores the entry of res, a set that changed nothing, under seqNo
// so a retry is answered the same.
func (s *Service) record(ctx context.Context, appKey string, seqNo int64, res SetResult, seqFor func(SetResult) *store.SeqEntry) (SetResult, error) {
	if e := seqFor(res); e != nil {
		if err := s.store.PutSeq(ctx, appKey, seqNo, *e); err != nil {
			return SetResult{}, fmt.Errorf("record seq_no %d: %w", seqNo, err)
		}
	}
	return res, nil
}

// deviceErr turns the store's ErrNotFound into the device's not-found
// error and wraps the others.
func deviceErr(device string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.NotFound("device", device)
	}
	return fmt.Errorf("device %q: %w", device, err)
}

// PropertyInfo is one property of a Summary.
type PropertyInfo struct {
	Name          string          `json:"name"`
	DesiredValue  json.RawMessage `json:"desired_value,omitempty"`
	DesiredSTime  int64           `json:"desired_stime,omitempty"`
	ReportedValue json.RawMessage `json:"reported_value,omitempty"`
	ReportedSTime int64           `json:"reported_stime,omitempty"`
}

// Summary is a device's property summary (docs/api.md, "Query device
// properties"). Its fields are in
// key order, as the API has always written them.
type Summary struct {
	AppVer              string         `json:"app_ver"`
	LastDesiredSTime    int64          `json:"last_desired_stime"`
	LastDesiredVersion  int64          `json:"last_desired_version"`
	LastReportedSTime   int64          `json:"last_reported_stime"`
	LastReportedVersion int64          `json:"last_reported_version"`
	Properties          []PropertyInfo `json:"properties"`
	SDKVer              string         `json:"sdk_ver"`
}

// Summary returns the device's property summary, properties sorted by
// name; a *errdefs.NotFoundError for an unknown device.
func (s *Service) Summary(ctx context.Context, appKey, device string) (Summary, error) {
	sh, err := s.store.GetShadow(ctx, appKey, device)
	if err != nil {
		return Summary{}, deviceErr(device, err)
	}
	props := make([]PropertyInfo, 0, len(sh.Properties))
	for name, p := range sh.Properties {
		props = append(props, PropertyInfo{name, p.DesiredValue, p.DesiredSTime, p.ReportedValue, p.ReportedSTime})
	}
	sort.Slice(props, func(i, j int) bool { return props[i].Name < props[j].Name })
	return Summary{
		AppVer:              sh.AppVer,
		LastDesiredSTime:    sh.LastDesiredSTime,
		LastDesiredVersion:  sh.LastDesiredVersion,
		LastReportedSTime:   sh.LastReportedSTime,
		LastReportedVersion: sh.LastReportedVersion,
		Properties:          props,
		SDKVer:              sh.SDKVer,
	}, nil
}
