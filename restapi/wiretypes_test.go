package restapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// The API builds its answers with the types of package apitypes. Where it
// writes one without encoding/json for speed, or converts a domain type
// into one, these tests hold the bytes to what encoding/json writes for
// the shared type, or for the domain type it replaced.

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

var answerIDs = []int64{0, 1, 42, 150552576000005, math.MaxInt64, -1, math.MinInt64}

func TestSendAnswerIsAPITypesSendAnswer(t *testing.T) {
	for _, id := range answerIDs {
		if got, want := sendAnswer(id), mustMarshal(t, apitypes.SendAnswer{MsgID: id}); !bytes.Equal(got, want) {
			t.Errorf("sendAnswer(%d) = %s, apitypes.SendAnswer %s", id, got, want)
		}
	}
}

func TestBroadcastAnswerIsAPITypesBroadcastCreated(t *testing.T) {
	for _, id := range answerIDs {
		for _, n := range []int64{0, 7, math.MaxInt64} {
			got := broadcastAnswer(id, n)
			want := mustMarshal(t, apitypes.BroadcastCreated{BroadcastID: id, Targets: n})
			if !bytes.Equal(got, want) {
				t.Errorf("broadcastAnswer(%d, %d) = %s, apitypes.BroadcastCreated %s", id, n, got, want)
			}
		}
	}
}

func TestErrorBodyIsAPITypesErrorBody(t *testing.T) {
	for _, msg := range []string{"", "device_name is required", `a "quoted" <tag> & é` + "\n\u2028"} {
		for _, code := range []int{CodeInternal, CodeInvalidParam, CodeRateLimited} {
			got := ErrorBody(code, msg)
			want := mustMarshal(t, apitypes.ErrorBody{Error: apitypes.ErrorDetail{Code: code, Message: msg}})
			if !bytes.Equal(got, want) {
				t.Errorf("ErrorBody(%d, %q) = %s, apitypes.ErrorBody %s", code, msg, got, want)
			}
		}
	}
}

// The property model was written as the stored []store.PropertyDef; its
// bounds are now json.Numbers, which must read as encoding/json wrote the
// stored float64s.
func TestModelAnswerWritesWhatTheStoredModelWrote(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	for _, model := range [][]store.PropertyDef{
		nil,
		{},
		{{Name: "temp", Type: store.TypeDouble, Min: f(-40.5), Max: f(125)}},
		{{Name: "n", Type: store.TypeInt, Min: f(-9007199254740993), Max: f(1e21)}, {Name: "s", Type: store.TypeString, MaxLength: n(64)}},
		{{Name: "tiny", Type: store.TypeDouble, Min: f(1e-7), Max: f(0.000001)}, {Name: "z", Type: store.TypeDouble, Min: f(math.Copysign(0, -1)), Max: f(0)}},
		{{Name: "big", Type: store.TypeDouble, Min: f(-math.MaxFloat64), Max: f(123456789012345678)}, {Name: "s0", Type: store.TypeString, MaxLength: n(0)}},
	} {
		old := model
		if old == nil {
			old = []store.PropertyDef{}
		}
		want := mustMarshal(t, gin.H{"properties": old})
		if got := mustMarshal(t, modelAnswer(model)); !bytes.Equal(got, want) {
			t.Errorf("model answer %s, the stored model wrote %s", got, want)
		}
	}
}

func testRecords() []store.Record {
	return []store.Record{
		{},
		{Type: store.RecordSubmitSuccess, ChannelKey: "app", MsgID: "150552576000005", UserID: "dev-1", SenderID: "dev-1", SentTime: 1795380300},
		{Type: store.RecordRetractionFailed, MsgID: "7", Sender: 1, SentTime: 1,
			Error: &store.RecordError{Code: 3004, Message: "already delivered <&>"}, Params: json.RawMessage(`{"job":"j1","n":[1,2]}`)},
	}
}

func TestRecordWritesWhatCallbackRecordWrote(t *testing.T) {
	for _, r := range testRecords() {
		want := mustMarshal(t, callback.Record{ID: "150552576000005-0", Record: r})
		if got := mustMarshal(t, record("150552576000005-0", r)); !bytes.Equal(got, want) {
			t.Errorf("record %s, callback.Record %s", got, want)
		}
	}
}

func TestRecordsCarryTheCallbackID(t *testing.T) {
	m := store.Message{ID: 150552576000005, AppKey: "app", DeviceName: "dev-1", Records: testRecords()}
	got := records(m)
	if len(got) != len(m.Records) {
		t.Fatalf("%d records, want %d", len(got), len(m.Records))
	}
	for i, r := range got {
		if want := fmt.Sprintf("150552576000005-%d", i); r.ID != want || r.ID != store.RecordID(m.ID, i) {
			t.Errorf("record %d id %q, want %q", i, r.ID, want)
		}
		want := mustMarshal(t, callback.Record{ID: store.RecordID(m.ID, i), Record: m.Filled(m.Records[i])})
		if b := mustMarshal(t, r); !bytes.Equal(b, want) {
			t.Errorf("record %d %s, callback.Record %s", i, b, want)
		}
	}
	if b := mustMarshal(t, records(store.Message{ID: 1})); string(b) != "[]" {
		t.Errorf("records of a message without records = %s, want []", b)
	}
}

func TestPropertySummaryWritesWhatShadowSummaryWrote(t *testing.T) {
	for _, s := range []shadow.Summary{
		{},
		{Properties: []shadow.PropertyInfo{}},
		{
			AppVer: "1.2", SDKVer: "go-0.3", LastDesiredSTime: 1795380300123, LastDesiredVersion: 4,
			LastReportedSTime: 1795380300456, LastReportedVersion: 3,
			Properties: []shadow.PropertyInfo{
				{Name: "a", DesiredValue: json.RawMessage(`21.5`), DesiredSTime: 1},
				{Name: "b", ReportedValue: json.RawMessage(`"on<&>"`), ReportedSTime: 2},
				{Name: "c"},
			},
		},
	} {
		if got, want := mustMarshal(t, propertySummary(s)), mustMarshal(t, s); !bytes.Equal(got, want) {
			t.Errorf("property summary %s, shadow.Summary %s", got, want)
		}
	}
	r := shadow.SetResult{DeviceName: "dev-1", OpCode: 6003, OpID: 99, OpStatus: "version mismatch"}
	if got, want := mustMarshal(t, apitypes.PropertySetAnswer(r)), mustMarshal(t, r); !bytes.Equal(got, want) {
		t.Errorf("property set answer %s, shadow.SetResult %s", got, want)
	}
}

func TestEventWritesWhatEventsWireWrote(t *testing.T) {
	w := events.Wire{ID: "12", Type: "device.up", AppKey: "app", DeviceName: "dev-1", Time: 1795380300123,
		Data: json.RawMessage(`{"topic":"t","qos":1,"payload":"<x>","encoding":"utf8"}`)}
	if got, want := mustMarshal(t, apitypes.Event(w)), mustMarshal(t, w); !bytes.Equal(got, want) {
		t.Errorf("event %s, events.Wire %s", got, want)
	}
}

func TestCallbackURLWritesWhatStoreWrote(t *testing.T) {
	u := store.CallbackURL{URL: "https://hooks.example.com/devmsg?a=1&b=2", Default: true}
	if got, want := mustMarshal(t, apitypes.CallbackURL(u)), mustMarshal(t, u); !bytes.Equal(got, want) {
		t.Errorf("callback URL %s, store.CallbackURL %s", got, want)
	}
}

// Answers the API wrote as gin.H maps, whose keys encoding/json sorts,
// are apitypes structs with their fields in key order: the bytes stay.
func TestMapAnswersKeepKeyOrder(t *testing.T) {
	tags := []string{"north"}
	for _, c := range []struct {
		typed any
		asMap gin.H
	}{
		{apitypes.CreatedApp{Key: "k", MasterSecret: "s", Name: "n"}, gin.H{"name": "n", "key": "k", "master_secret": "s"}},
		{apitypes.AppList{Apps: []apitypes.AppSummary{}}, gin.H{"apps": []apitypes.AppSummary{}}},
		{apitypes.MasterSecret{Key: "k", MasterSecret: "s"}, gin.H{"key": "k", "master_secret": "s"}},
		{apitypes.PropertyModel{Properties: []apitypes.PropertyDef{}}, gin.H{"properties": []apitypes.PropertyDef{}}},
		{apitypes.DevicePage{Devices: []apitypes.DeviceSummary{}, NextCursor: "c"}, gin.H{"devices": []apitypes.DeviceSummary{}, "next_cursor": "c"}},
		{apitypes.MessagePage{Messages: []apitypes.Message{}, NextCursor: "c"}, gin.H{"messages": []apitypes.Message{}, "next_cursor": "c"}},
		{apitypes.AdminDevice{Device: apitypes.DeviceDetail{Name: "d", Tags: tags}, Properties: apitypes.PropertySummary{}},
			gin.H{"device": apitypes.DeviceDetail{Name: "d", Tags: tags}, "properties": apitypes.PropertySummary{}}},
		{apitypes.DeletedDevice{Deleted: true, DeviceName: "d"}, gin.H{"device_name": "d", "deleted": true}},
		{apitypes.CreateDevicesAnswer{Resp: []apitypes.CreateDeviceResult{{DeviceName: "d"}}}, gin.H{"resp": []apitypes.CreateDeviceResult{{DeviceName: "d"}}}},
		{apitypes.BaseInfo{DeviceSecret: "s", Flag: 1, Tags: tags, TimeActive: 2, TimeCreate: 3},
			gin.H{"device_secret": "s", "flag": 1, "time_create": int64(3), "time_active": int64(2), "tags": tags}},
		{apitypes.DeviceStatus{ClientIP: "1.2.3.4", LastLoginTime: "5", LastLogoutTime: "", Status: 1},
			gin.H{"status": 1, "client_ip": "1.2.3.4", "last_login_time": "5", "last_logout_time": ""}},
		{apitypes.CallbackURLs{URLs: []apitypes.CallbackURL{}}, gin.H{"urls": []store.CallbackURL{}}},
		{apitypes.URLTest{OK: true, URL: "u"}, gin.H{"url": "u", "ok": true}},
		{apitypes.Deliveries{Deliveries: []apitypes.Delivery{}}, gin.H{"deliveries": []apitypes.Delivery{}}},
		{apitypes.DeadLetters{DeadLetters: []apitypes.DeadLetter{}, Next: "n"}, gin.H{"dead_letters": []apitypes.DeadLetter{}, "next": "n"}},
		{apitypes.Redelivered{ID: "1", Records: 2}, gin.H{"id": "1", "records": 2}},
		{apitypes.EventWebhooks{SigningSecret: "s", Webhooks: []apitypes.EventWebhook{}}, gin.H{"webhooks": []apitypes.EventWebhook{}, "signing_secret": "s"}},
	} {
		if got, want := mustMarshal(t, c.typed), mustMarshal(t, c.asMap); !bytes.Equal(got, want) {
			t.Errorf("%T writes %s, the map wrote %s", c.typed, got, want)
		}
	}
}
