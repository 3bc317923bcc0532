package command

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestPayloadAndDoneMatchEncodingJSON holds Payload and doneEvent, written
// by hand, to the bytes json.Marshal writes for the documents
// docs/device-protocol.md and docs/events.md describe.
func TestPayloadAndDoneMatchEncodingJSON(t *testing.T) {
	strs := []string{"", "ping", `quo"te`, "<b>&amp;", "tab\there", "ünï", "\u2028", "bad\xffutf8"}
	raws := []json.RawMessage{nil, json.RawMessage(`{"seq":1}`), json.RawMessage(`{ "a" : [1, 2] }`), json.RawMessage(`"<x>"`), json.RawMessage(`null`)}
	rng := rand.New(rand.NewPCG(7, 8))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	n := func() int64 { return rng.Int64N(3) * rng.Int64N(1<<45) }
	for range 1000 {
		c := store.Command{ID: 1 + n(), Name: pick(), Params: raws[rng.IntN(len(raws))], Timeout: n(), TTL: n(), TimeCreate: n(),
			State: pick(), Code: int(n()%9) - 4, Result: raws[rng.IntN(len(raws))], Message: pick(), Job: n()}
		params := c.Params
		if len(params) == 0 {
			params = json.RawMessage("null")
		}
		want, _ := json.Marshal(struct {
			CmdID      string          `json:"cmd_id"`
			Name       string          `json:"name"`
			Params     json.RawMessage `json:"params"`
			Timeout    int64           `json:"timeout"`
			ExpireTime int64           `json:"expire_time"`
		}{strconv.FormatInt(c.ID, 10), c.Name, params, c.Timeout, c.TimeCreate/1000 + c.TTL})
		if got := Payload(c); string(got) != string(want) {
			t.Fatalf("payload:\n got %s\nwant %s", got, want)
		}
		done := struct {
			CmdID   string          `json:"cmd_id"`
			Name    string          `json:"name"`
			State   string          `json:"state"`
			Code    int             `json:"code"`
			Result  json.RawMessage `json:"result,omitempty"`
			Message string          `json:"message"`
			JobID   string          `json:"job_id,omitempty"`
		}{CmdID: strconv.FormatInt(c.ID, 10), Name: c.Name, State: c.State, Code: c.Code, Result: c.Result, Message: c.Message}
		if c.Job != 0 {
			done.JobID = strconv.FormatInt(c.Job, 10)
		}
		want, _ = json.Marshal(done)
		if got := doneEvent(c, 1).Data; string(got) != string(want) {
			t.Fatalf("command.done:\n got %s\nwant %s", got, want)
		}
	}
}

var replyCases = []string{
	`{"cmd_id":"12","code":0,"result":{"a":[1,2]},"message":"ok"}`, `{"cmd_id":12,"code":1}`, `{"code":-3,"message":null}`,
	`{"cmd_id":"12","code":1.0}`, `{"cmd_id":"12","code":"1"}`, `{"CMD_ID":"12","code":0}`, `{"cmd_id":"1\u0032","code":0}`,
	`{"code":0,"code":null}`, `{"code":0,"message":"caf\u00e9"}`, `{"code":0,"message":"é"}`, `{"code":0,"extra":1}`,
	`{"code":99999999999999999999}`, `{"code":0,"result":null}`, ` { "code" : 0 , "result" : "x" } `, `{"code":0,"result":"\xff"}`,
	`[1]`, `{"code":0`, `{}`, `{"code":+1}`, `{"code":01}`, `{"code":0,"message":"a","message":"b"}`,
}

// TestScanReplyMatchesDecoder: whatever scanReply reads, it reads as
// encoding/json does; what it does not take goes the decoder's way.
func TestScanReplyMatchesDecoder(t *testing.T) {
	for _, c := range replyCases {
		checkScanReply(t, []byte(c))
	}
}

func FuzzScanReply(f *testing.F) {
	for _, c := range replyCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkScanReply)
}

func checkScanReply(t *testing.T, payload []byte) {
	got, ok := scanReply(payload)
	if !ok {
		return
	}
	var want replyPayload
	if err := json.Unmarshal(payload, &want); err != nil {
		t.Fatalf("scanReply took %q, which encoding/json refuses: %v", payload, err)
	}
	if string(got.CmdID) != string(want.CmdID) || string(got.Result) != string(want.Result) ||
		(got.Code == nil) != (want.Code == nil) || got.Code != nil && *got.Code != *want.Code ||
		(got.Message == nil) != (want.Message == nil) || got.Message != nil && *got.Message != *want.Message {
		t.Fatalf("scanReply(%q) = %+v, encoding/json %+v", payload, got, want)
	}
}
