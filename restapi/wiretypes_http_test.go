package restapi_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/devmsg/devmsg/apitypes"
)

// sameAsAPIType decodes body into v, a pointer to an apitypes type,
// refusing a field the type does not declare, and checks that
// encoding/json writes v back as the same bytes: the hand-written answers
// (and the domain's) have the shared type's field names, order and
// omissions.
func sameAsAPIType(t *testing.T, what string, body []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %s does not decode as %T: %v", what, body, v, err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, body) {
		t.Errorf("%s: the API wrote\n%s\nand %T writes\n%s", what, body, v, again)
	}
}

func TestFastPathAnswersAreAPITypes(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-a", "dev-b")

	r := e.call("POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-a","msg_body":"hi"}`)
	r.wantOK(t)
	sameAsAPIType(t, "send", r.body, &apitypes.SendAnswer{})

	r = e.call("POST", "/msg/v1/msgs", `{"seq_no":2,"device_names":["dev-a","nobody","","dev-b"],"msg_body":"hi"}`)
	r.wantOK(t)
	sameAsAPIType(t, "batch send", r.body, &apitypes.BatchSendAnswer{})

	r = e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":["north","floor-2"]}`)
	r.wantOK(t)
	sameAsAPIType(t, "set tags", r.body, &apitypes.DeviceTags{})

	r = e.call("POST", "/msg/v1/broadcast", `{"seq_no":3,"target":{"tag":"north"},"msg_body":"hi"}`)
	r.wantOK(t)
	sameAsAPIType(t, "broadcast", r.body, &apitypes.BroadcastCreated{})

	r = e.call("POST", "/msg/v1/msg", `{"seq_no":4,"msg_body":"hi"}`)
	r.wantError(t, 400, 1002)
	sameAsAPIType(t, "error", r.body, &apitypes.ErrorBody{})

	for _, path := range []string{"/healthz", "/readyz"} {
		r = e.do("GET", path, nil, nil)
		r.wantOK(t)
		sameAsAPIType(t, path, r.body, &apitypes.Health{})
	}
}
