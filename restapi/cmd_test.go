package restapi_test

import (
	"fmt"
	"strings"
	"testing"
)

type commandView struct {
	CmdID      int64  `json:"cmd_id"`
	DeviceName string `json:"device_name"`
	State      string `json:"state"`
	Code       *int   `json:"code"`
	TimeDone   int64  `json:"time_done"`
}

// TestCommandEndpoints drives every command endpoint through the
// OpenAPI checker of newEnv: each answer, errors included, must match
// docs/openapi.yaml. No device is online here, so commands end offline
// or wait queued.
func TestCommandEndpoints(t *testing.T) {
	e := newEnv(t)
	e.createDevices("cmd-0001", "cmd-0002")

	var v commandView
	r := e.call("POST", "/cmd/v1/cmd", `{"seq_no":1,"device_name":"cmd-0001","name":"ping","params":{"a":[1,2]},"wait":1}`)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "offline" || v.TimeDone == 0 || v.DeviceName != "cmd-0001" {
		t.Fatalf("ttl 0 with no device online: %+v", v)
	}
	r = e.call("POST", "/cmd/v1/cmd", `{"seq_no":2,"device_name":"cmd-0001","name":"reboot","ttl":60,"wait":0}`)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "queued" {
		t.Fatalf("ttl 60: %+v", v)
	}
	queued := v.CmdID
	// The same seq_no and body: the same command, as it is now.
	r = e.call("POST", "/cmd/v1/cmd", `{"seq_no":2,"device_name":"cmd-0001","name":"reboot","ttl":60,"wait":0}`)
	r.wantOK(t)
	r.decode(t, &v)
	if v.CmdID != queued {
		t.Fatalf("repeat answered %d, want %d", v.CmdID, queued)
	}
	e.call("POST", "/cmd/v1/cmd", `{"seq_no":2,"device_name":"cmd-0001","name":"other","ttl":60}`).wantError(t, 400, 1003)

	r = e.call("GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=1", queued), nil)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "queued" {
		t.Fatalf("GET: %+v", v)
	}
	r = e.call("DELETE", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", queued), nil)
	r.wantOK(t)
	r.decode(t, &v)
	if v.State != "cancelled" {
		t.Fatalf("DELETE: %+v", v)
	}

	var batch struct {
		Resp []commandView `json:"resp"`
	}
	r = e.call("POST", "/cmd/v1/cmds", `{"seq_no":3,"device_names":["cmd-0001","nobody","cmd-0002","cmd-0001"],"name":"ping","wait":1}`)
	r.wantOK(t)
	r.decode(t, &batch)
	var empty struct {
		Resp []commandView `json:"resp"`
	}
	r = e.call("POST", "/cmd/v1/cmds", `{"seq_no":6,"device_names":[""],"name":"ping","wait":0}`)
	r.wantOK(t)
	r.decode(t, &empty)
	if len(empty.Resp) != 1 || *empty.Resp[0].Code != 1002 {
		t.Fatalf("an empty name: %+v", empty.Resp)
	}
	if len(batch.Resp) != 4 || batch.Resp[0].State != "offline" || batch.Resp[1].CmdID != 0 || *batch.Resp[1].Code != 1003 ||
		batch.Resp[2].State != "offline" || *batch.Resp[3].Code != 1003 {
		t.Fatalf("batch: %+v", batch.Resp)
	}
	r = e.call("POST", "/cmd/v1/cmds", `{"seq_no":3,"device_names":["cmd-0001","nobody","cmd-0002","cmd-0001"],"name":"ping","wait":1}`)
	r.wantOK(t)
	var again struct {
		Resp []commandView `json:"resp"`
	}
	r.decode(t, &again)
	if again.Resp[0].CmdID != batch.Resp[0].CmdID || again.Resp[2].CmdID != batch.Resp[2].CmdID {
		t.Fatalf("batch repeat: %+v, want %+v", again.Resp, batch.Resp)
	}

	e.call("POST", "/cmd/v1/cmd", `{"seq_no":4,"device_name":"cmd-0001"}`).wantError(t, 400, 1002)
	e.call("POST", "/cmd/v1/cmd", `{"seq_no":4,"device_name":"cmd-0001","name":"no spaces"}`).wantError(t, 400, 1003)
	e.call("POST", "/cmd/v1/cmd", `{"seq_no":4,"device_name":"nobody","name":"a"}`).wantError(t, 400, 1003)
	e.call("POST", "/cmd/v1/cmds", `{"seq_no":5,"device_names":[],"name":"a"}`).wantError(t, 400, 1003)
	e.call("GET", "/cmd/v1/cmd", nil).wantError(t, 400, 1002)
	e.call("GET", "/cmd/v1/cmd?cmd_id=1", nil).wantError(t, 400, 1003)
	e.call("DELETE", "/cmd/v1/cmd?cmd_id=x", nil).wantError(t, 400, 1003)
}

// TestMalformedIDs: an id devmsg could never have given (0, negative,
// not a number) is refused as malformed, naming the field, on every
// endpoint that reads one, rather than looked up and reported unknown.
func TestMalformedIDs(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{"/msg/v1/msg?msgid=", "/msg/v1/broadcast?broadcast_id=", "/cmd/v1/cmd?cmd_id=", "/job/v1/job?job_id=", "/job/v1/job/executions?job_id="} {
		field := q[strings.Index(q, "?")+1 : len(q)-1]
		for _, id := range []string{"-5", "0", "1.5", "x"} {
			e.call("GET", q+id, nil).wantError(t, 400, 1003, field+" must be a positive integer")
		}
	}
	e.call("DELETE", "/cmd/v1/cmd?cmd_id=-5", nil).wantError(t, 400, 1003, "cmd_id must be a positive integer")
	e.call("POST", "/job/v1/job/cancel", `{"job_id":-5}`).wantError(t, 400, 1003, "job_id must be a positive integer")
}

// TestCommandRateLimit: every command takes a token of the app's
// command rate, a batch one per name, all or none.
func TestCommandRateLimit(t *testing.T) {
	e := newEnv(t)
	e.createDevices("cmd-a", "cmd-b", "cmd-c", "cmd-d")
	c := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"command":3}`, &c).wantOK(t)
	e.call("POST", "/cmd/v1/cmds", `{"seq_no":1,"device_names":["cmd-a","cmd-b","cmd-c","cmd-d"],"name":"x","wait":0}`).
		wantError(t, 429, 2002, "smaller batches")
	e.call("POST", "/cmd/v1/cmds", `{"seq_no":2,"device_names":["cmd-a","cmd-b"],"name":"x","wait":0}`).wantOK(t)
	e.call("POST", "/cmd/v1/cmd", `{"seq_no":3,"device_name":"cmd-c","name":"x","wait":0}`).wantOK(t)
	r := e.call("POST", "/cmd/v1/cmd", `{"seq_no":4,"device_name":"cmd-d","name":"x","wait":0}`)
	r.wantError(t, 429, 2002, "command")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Reads are queries, not commands.
	e.call("GET", "/cmd/v1/cmd?cmd_id=1", nil).wantError(t, 400, 1003)
}
