package apitypes

import (
	"encoding/json"
	"testing"
)

// A request field left nil is left out of the body (the API keeps the
// value or takes its default); one pointing at a zero or empty value is
// sent, because there it means something.
func TestRequestsLeaveOutOnlyNil(t *testing.T) {
	zero, off := int64(0), false
	none, noTags, flag := []int{}, []string{}, 0
	for _, c := range []struct {
		v    any
		want string
	}{
		{CallbackChange{}, `{}`},
		{CallbackChange{Enabled: &off, Types: &none}, `{"enabled":false,"types":[]}`},
		{DevicePatch{}, `{}`},
		{DevicePatch{Flag: &flag, Tags: &noTags}, `{"flag":0,"tags":[]}`},
		{SendRequest{SeqNo: 1, DeviceName: "d", MsgBody: "m"}, `{"seq_no":1,"device_name":"d","msg_body":"m"}`},
		{SendRequest{SeqNo: 1, DeviceName: "d", MsgBody: "m", TTL: &zero}, `{"seq_no":1,"device_name":"d","msg_body":"m","ttl":0}`},
		{BroadcastRequest{SeqNo: 1, Target: BroadcastTarget{All: true}, MsgBody: "m"}, `{"seq_no":1,"target":{"all":true},"msg_body":"m"}`},
		{BroadcastRequest{SeqNo: 1, Target: BroadcastTarget{Tag: "north"}, MsgBody: "m"}, `{"seq_no":1,"target":{"tag":"north"},"msg_body":"m"}`},
		{EventWebhookRequest{URL: "https://h/x"}, `{"url":"https://h/x"}`},
		{NewDevice{Name: "d"}, `{"name":"d","mark":""}`},
		{PropertyDef{Name: "p", Type: "int"}, `{"name":"p","type":"int"}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%T %+v writes %s, want %s", c.v, c.v, b, c.want)
		}
	}
}
