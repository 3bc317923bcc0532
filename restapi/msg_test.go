package restapi_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type messageView struct {
	Msgid      int64
	DeviceName string `json:"device_name"`
	State      string
	TTL        int64
	TimeCreate int64 `json:"time_create"`
	Records    []struct {
		Type       int
		Channelkey string
		Msgid      string
		Userid     string
		SenderID   string `json:"sender_id"`
		Sender     int
		SentTime   int64 `json:"sent_time"`
		Error      *struct {
			Code    int
			Message string
		}
		Params map[string]any
	}
}

func (e *env) send(body string) int64 {
	e.t.Helper()
	r := e.call("POST", "/msg/v1/msg", body)
	r.wantOK(e.t)
	var out struct{ Msgid int64 }
	r.decode(e.t, &out)
	if out.Msgid <= 0 {
		e.t.Fatalf("msgid %d", out.Msgid)
	}
	return out.Msgid
}

func (e *env) message(id int64) messageView {
	e.t.Helper()
	r := e.call("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), nil)
	r.wantOK(e.t)
	var m messageView
	r.decode(e.t, &m)
	return m
}

func TestSendMessage(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001", "dev-0002")
	before := time.Now().Unix()
	id := e.send(`{"seq_no":1,"device_name":"dev-0001","msg_body":"hello"}`)
	m := e.message(id)
	if m.Msgid != id || m.DeviceName != "dev-0001" || m.State != "pending" || m.TTL != 86400 || m.TimeCreate < before {
		t.Fatalf("message %+v", m)
	}
	if len(m.Records) != 2 || m.Records[0].Type != 0 || m.Records[1].Type != 2 {
		t.Fatalf("records %+v, want types 0 and 2", m.Records)
	}
	r := m.Records[0]
	if r.Channelkey != e.app.Key || r.Msgid != fmt.Sprint(id) || r.Userid != "dev-0001" || r.SenderID != "dev-0001" || r.Sender != 0 || r.SentTime < before || r.Error != nil {
		t.Errorf("record %+v", r)
	}

	t.Run("msgids are unique and increasing", func(t *testing.T) {
		id2 := e.send(`{"seq_no":2,"device_name":"dev-0001","msg_body":"again"}`)
		if id2 <= id {
			t.Fatalf("msgid %d after %d", id2, id)
		}
	})
	t.Run("limits", func(t *testing.T) { testSendLimits(t, e) })
	t.Run("callback params are copied into records", func(t *testing.T) { testSendCallbackParams(t, e) })
	t.Run("disabled device", func(t *testing.T) { testSendToDisabled(t, e) })
	t.Run("get message errors", func(t *testing.T) {
		e.call("GET", "/msg/v1/msg", nil).wantError(t, 400, 1002, "msgid")
		e.call("GET", "/msg/v1/msg?msgid=abc", nil).wantError(t, 400, 1003, "msgid")
		e.call("GET", "/msg/v1/msg?msgid=12345", nil).wantError(t, 400, 1003, "not found")
	})
}

// testSendLimits is TestSendMessage's subtest of the size and ttl
// limits.
func testSendLimits(t *testing.T, e *env) {
	ok := []struct{ name, body string }{
		{"2048 bytes", `{"seq_no":10,"device_name":"dev-0001","msg_body":"` + strings.Repeat("b", 2048) + `"}`},
		{"2048 bytes of 2-byte runes", `{"seq_no":11,"device_name":"dev-0001","msg_body":"` + strings.Repeat("é", 1024) + `"}`},
		{"ttl 0", `{"seq_no":12,"device_name":"dev-0001","msg_body":"x","ttl":0}`},
		{"ttl max", `{"seq_no":13,"device_name":"dev-0001","msg_body":"x","ttl":604800}`},
		{"ttl null means default", `{"seq_no":14,"device_name":"dev-0001","msg_body":"x","ttl":null}`},
		{"params of exactly 1 KiB", `{"seq_no":16,"device_name":"dev-0001","msg_body":"x","callback":{"params":{"k":"` + strings.Repeat("p", 1016) + `"}}}`},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) { e.send(tc.body) })
	}
	id := e.send(`{"seq_no":15,"device_name":"dev-0001","msg_body":"x","ttl":0}`)
	m := e.message(id)
	if m.TTL != 0 || m.State != "failed" || len(m.Records) != 3 || m.Records[2].Type != 5 || m.Records[2].Error == nil || m.Records[2].Error.Code != 3006 {
		t.Errorf("ttl 0 to an offline device: %+v", m)
	}
	bad := []struct {
		name, body string
		code       int
		fragment   string
	}{
		{"2049 bytes", `{"seq_no":20,"device_name":"dev-0001","msg_body":"` + strings.Repeat("b", 2049) + `"}`, 1003, "msg_body"},
		{"2050 bytes of runes", `{"seq_no":20,"device_name":"dev-0001","msg_body":"` + strings.Repeat("é", 1025) + `"}`, 1003, "msg_body"},
		{"empty body", `{"seq_no":20,"device_name":"dev-0001","msg_body":""}`, 1003, "msg_body"},
		{"missing msg_body", `{"seq_no":20,"device_name":"dev-0001"}`, 1002, "msg_body"},
		{"msg_body not a string", `{"seq_no":20,"device_name":"dev-0001","msg_body":5}`, 1003, "msg_body"},
		{"ttl over max", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","ttl":604801}`, 1003, "ttl"},
		{"ttl negative", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","ttl":-1}`, 1003, "ttl"},
		{"ttl string", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","ttl":"60"}`, 1003, "ttl"},
		{"missing seq_no", `{"device_name":"dev-0001","msg_body":"x"}`, 1002, "seq_no"},
		{"missing device_name", `{"seq_no":20,"msg_body":"x"}`, 1002, "device_name"},
		{"unknown device", `{"seq_no":20,"device_name":"ghost","msg_body":"x"}`, 1003, "not found"},
		{"callback not an object", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","callback":"http://x"}`, 1003, "callback"},
		{"callback url not http", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","callback":{"url":"ftp://x"}}`, 1003, "callback.url"},
		{"callback params not an object", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","callback":{"params":[1]}}`, 1003, "callback.params"},
		{"callback params over 1 KiB", `{"seq_no":20,"device_name":"dev-0001","msg_body":"x","callback":{"params":{"k":"` + strings.Repeat("p", 1017) + `"}}}`, 1003, "callback.params"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e.call("POST", "/msg/v1/msg", tc.body).wantError(t, 400, tc.code, tc.fragment)
		})
	}
}

// testSendCallbackParams is TestSendMessage's subtest of a send's
// callback params.
func testSendCallbackParams(t *testing.T, e *env) {
	id := e.send(`{"seq_no":30,"device_name":"dev-0001","msg_body":"x","callback":{"url":"https://example.com/cb","params":{"order":"A-17","n":3}}}`)
	for _, r := range e.message(id).Records {
		if r.Params["order"] != "A-17" || r.Params["n"] != float64(3) {
			t.Errorf("record params %v", r.Params)
		}
	}
}

// testSendToDisabled is TestSendMessage's subtest of a send to a
// disabled device.
func testSendToDisabled(t *testing.T, e *env) {
	adm := adminCreds()
	e.do("PATCH", "/admin/v1/apps/"+e.app.Key+"/devices/dev-0002", `{"flag":1}`, &adm).wantOK(t)
	id := e.send(`{"seq_no":40,"device_name":"dev-0002","msg_body":"x"}`)
	m := e.message(id)
	if m.State != "failed" || len(m.Records) != 1 || m.Records[0].Type != 1 || m.Records[0].Error == nil || m.Records[0].Error.Code != 3003 {
		t.Fatalf("message to a disabled device: %+v", m)
	}
}

func TestSendQueueLimit(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-full")
	var seq atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := seq.Add(1)
				if n > 1000 {
					return
				}
				e.send(fmt.Sprintf(`{"seq_no":%d,"device_name":"dev-full","msg_body":"m%d"}`, n, n))
			}
		}()
	}
	wg.Wait()
	id := e.send(`{"seq_no":5000,"device_name":"dev-full","msg_body":"one too many"}`)
	m := e.message(id)
	if m.State != "failed" || len(m.Records) != 2 || m.Records[0].Type != 0 || m.Records[1].Type != 3 || m.Records[1].Error == nil || m.Records[1].Error.Code != 3004 {
		t.Fatalf("1001st message: %+v", m)
	}
}

// TestListMessages pages through an app's messages newest first, with
// their current states, and keeps each app to its own.
func TestListMessages(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001", "dev-0002")
	var ids []int64
	for i := range 5 {
		ids = append(ids, e.send(fmt.Sprintf(`{"seq_no":%d,"device_name":"dev-000%d","msg_body":"m%d","ttl":%d}`, i+1, i%2+1, i, 60*(i%2))))
	}
	other := e.createApp("other")
	type page struct {
		Messages   []messageView
		NextCursor string `json:"next_cursor"`
	}
	list := func(c creds, app, query string) page {
		t.Helper()
		r := e.do("GET", "/admin/v1/apps/"+app+"/messages"+query, nil, &c)
		r.wantOK(t)
		var p page
		r.decode(t, &p)
		return p
	}
	p := list(e.appCreds(), e.app.Key, "?limit=2")
	if len(p.Messages) != 2 || p.Messages[0].Msgid != ids[4] || p.Messages[1].Msgid != ids[3] || p.NextCursor != fmt.Sprint(ids[3]) {
		t.Fatalf("first page %+v, want %d and %d", p, ids[4], ids[3])
	}
	if m := p.Messages[0]; m.DeviceName != "dev-0001" || m.State != "failed" || m.TTL != 0 || len(m.Records) != 3 {
		t.Errorf("listed message %+v: ttl 0 to an offline device has failed", m)
	}
	p = list(adminCreds(), e.app.Key, "?limit=2&cursor="+p.NextCursor)
	if len(p.Messages) != 2 || p.Messages[0].Msgid != ids[2] || p.Messages[1].Msgid != ids[1] || p.Messages[1].State != "pending" {
		t.Fatalf("second page %+v", p)
	}
	p = list(adminCreds(), e.app.Key, "?limit=2&cursor="+p.NextCursor)
	if len(p.Messages) != 1 || p.Messages[0].Msgid != ids[0] || p.Messages[0].DeviceName != "dev-0001" || p.NextCursor != "" {
		t.Fatalf("last page %+v", p)
	}
	if p := list(adminCreds(), e.app.Key, ""); len(p.Messages) != 5 || p.NextCursor != "" {
		t.Fatalf("default page %+v", p)
	}
	if p := list(credsOf(other), other.Key, ""); len(p.Messages) != 0 || p.NextCursor != "" {
		t.Fatalf("another app lists %+v", p)
	}
	own := e.appCreds()
	e.do("GET", "/admin/v1/apps/"+other.Key+"/messages", nil, &own).wantError(t, 401, 1004)
	e.do("GET", "/admin/v1/apps/"+e.app.Key+"/messages?cursor=x", nil, &own).wantError(t, 400, 1003, "cursor")
	e.do("GET", "/admin/v1/apps/"+e.app.Key+"/messages?limit=1001", nil, &own).wantError(t, 400, 1003, "limit")
}
