package message

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

func TestRecordsFillStoredFields(t *testing.T) {
	m := store.Message{ID: 42, AppKey: "app", DeviceName: "dev-1", Params: json.RawMessage(`{"k":1}`)}
	now := time.Unix(1700000000, 0)
	m.Records = []store.Record{NewRecord(m, store.RecordTargetValid, 0, "", now), NewRecord(m, store.RecordSubmitFailure, ErrCodeQueueFull, "full", now)}
	stored, _ := json.Marshal(m.Records)
	if want := `[{"type":0,"sender":0,"sent_time":1700000000},{"type":3,"sender":0,"sent_time":1700000000,"error":{"code":3004,"message":"full"}}]`; string(stored) != want {
		t.Errorf("stored records %s, want %s", stored, want)
	}
	got, _ := json.Marshal(Records(m))
	want := `[{"type":0,"channelkey":"app","msgid":"42","userid":"dev-1","sender_id":"dev-1","sender":0,"sent_time":1700000000,"params":{"k":1}},` +
		`{"type":3,"channelkey":"app","msgid":"42","userid":"dev-1","sender_id":"dev-1","sender":0,"sent_time":1700000000,"error":{"code":3004,"message":"full"},"params":{"k":1}}]`
	if string(got) != want {
		t.Errorf("records %s\nwant %s", got, want)
	}
}
