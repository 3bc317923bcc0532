package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCallbacksEveryType drives real devices through every message
// outcome and checks that each status record type 0-8 reaches a real
// receiver, with the fields, the Basic header and a signature that
// verifies.
func TestCallbacksEveryType(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	rcv := newReceiver(t)
	f.addURL(rcv.url("/cb"))
	f.setCallback(`{"enabled":true}`)
	secret := f.createDevice("every-1")
	f.createDevice("every-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/every-off", `{"flag":1}`, nil)
	f.createDevice("every-full")

	d := f.mustConnect("every-1", secret, "msg")
	var delivered int64
	withParams := fmt.Sprintf(`{"seq_no":%d,"device_name":"every-1","msg_body":"hi","ttl":60,"callback":{"params":{"order":"A-1"}}}`, f.seq.Add(1))
	var r struct{ Msgid int64 }
	f.restOK("POST", "/msg/v1/msg", withParams, &r)
	delivered = r.Msgid
	f.waitState(delivered, "delivered")                                 // 0, 2, 4
	d.publish(t, "msg/click", fmt.Sprintf(`{"msgid":"%d"}`, delivered)) // 6
	waitFor(t, 5*time.Second, "click", func() bool { return len(f.message(delivered).Records) == 4 })
	if st, b := f.rest("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", delivered), ""); st != 200 { // 8: already delivered
		t.Fatalf("retract delivered: %d %s", st, b)
	}
	invalid := f.send("every-off", "to a disabled device", 60) // 1
	d.c.Disconnect(0)
	waitFor(t, 5*time.Second, "every-1 offline", func() bool { return f.status("every-1").Status == 0 })
	offline := f.send("every-1", "now or never", 0) // 0, 5 (3006)
	retracted := f.send("every-1", "withdrawn", 60) // 0, 2, 7
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", retracted), "", nil)
	full := overfillQueue(t, f, "every-full") // 3: the 1001st pending message

	want := map[int64][]int{
		delivered: {0, 2, 4, 6, 8},
		invalid:   {1},
		offline:   {0, 2, 5},
		retracted: {0, 2, 7},
		full:      {0, 3},
	}
	waitRecordTypes(t, f, rcv, want, 15*time.Second)

	wantErr := map[string]int{fmt.Sprint(invalid): 3003, fmt.Sprint(offline): 3006, fmt.Sprint(full): 3004, fmt.Sprint(delivered): 3008}
	checkRecordFields(t, rcv, wantErr, fmt.Sprint(delivered), `{"order":"A-1"}`)
	checkCallbackHeaders(t, f, rcv)
}

// overfillQueue sends device 1001 messages, one past its queue's 1000,
// and returns the msgid of the last, refused one.
func overfillQueue(t *testing.T, f *fleet, device string) int64 {
	t.Helper()
	var full int64
	for i := 0; i <= 1000; i++ {
		st, b := f.rest("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"m","ttl":600}`, f.seq.Add(1), device))
		if st != 200 {
			t.Fatalf("send %d: %d %s", i, st, b)
		}
		if i == 1000 {
			fmt.Sscanf(strings.TrimPrefix(string(b), `{"msgid":`), "%d", &full)
		}
	}
	return full
}

// waitRecordTypes waits until the receiver has each message's record
// types of want, in order, and fails t if they have not all come within
// timeout.
func waitRecordTypes(t *testing.T, f *fleet, rcv *receiver, want map[int64][]int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for id, types := range want {
		for !slices.Equal(rcv.ofMessage(id), types) {
			if time.Now().After(deadline) {
				t.Fatalf("message %d: records %v reached the receiver, want %v (stored: %v)", id, rcv.ofMessage(id), types, f.message(id).types())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// checkRecordFields checks every record the receiver got once: the app
// key, sender and time, the id, an error object exactly on types 1, 3, 5
// and 8 with the code wantErr gives for its message, the params of
// message withParams, and the device in userid and sender_id.
func checkRecordFields(t *testing.T, rcv *receiver, wantErr map[string]int, withParams, params string) {
	t.Helper()
	seen := map[string]bool{}
	for _, rec := range rcv.records() {
		if seen[rec.ID] {
			continue // at-least-once: a duplicate is allowed, and identical
		}
		seen[rec.ID] = true
		if rec.ChannelKey != demoKey || rec.Sender == nil || *rec.Sender != 0 || rec.SentTime < time.Now().Add(-time.Minute).Unix() {
			t.Errorf("record %+v: wrong channelkey, sender or sent_time", rec)
		}
		if rec.ID == "" || !strings.HasPrefix(rec.ID, rec.MsgID+"-") {
			t.Errorf("record %+v: id must be <msgid>-<n>", rec)
		}
		hasErr := rec.Type == 1 || rec.Type == 3 || rec.Type == 5 || rec.Type == 8
		if hasErr != (rec.Error != nil) {
			t.Errorf("record %+v: error object present %v, want %v", rec, rec.Error != nil, hasErr)
		}
		if hasErr && (rec.Error.Code != wantErr[rec.MsgID] || rec.Error.Message == "") {
			t.Errorf("record %+v: error %+v, want code %d", rec, rec.Error, wantErr[rec.MsgID])
		}
		if rec.MsgID == withParams && string(rec.Params) != params {
			t.Errorf("record %+v: params %s, want the send's", rec, rec.Params)
		}
		if rec.UserID == "" || rec.UserID != rec.SenderID {
			t.Errorf("record %+v: userid and sender_id must name the device", rec)
		}
	}
}

// checkCallbackHeaders checks every POST the receiver got: the app's
// Basic credentials, the JSON content type and a signature that verifies
// with the app's signing secret.
func checkCallbackHeaders(t *testing.T, f *fleet, rcv *receiver) {
	t.Helper()
	sig := f.signingSecret()
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte(demoKey+":"+demoSecret))
	for _, b := range rcv.got() {
		if got := b.header.Get("Authorization"); got != wantAuth {
			t.Fatalf("Authorization %q, want %q", got, wantAuth)
		}
		if ct := b.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		verifySignature(t, sig, b)
	}
}

// TestCallbackBatching: 150 records made at once go as one batch of
// exactly 100 and, after the flush interval, one of 50.
func TestCallbackBatching(t *testing.T) {
	t.Parallel()
	flush := 1500 * time.Millisecond
	f := callbackFleet(t, "--callback.flush_interval", flush.String())
	rcv := newReceiver(t)
	f.addURL(rcv.url("/batch"))
	f.setCallback(`{"enabled":true}`)
	f.createDevice("batch-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/batch-off", `{"flag":1}`, nil)

	start := time.Now()
	for range 150 {
		f.send("batch-off", "one record each", 60) // type 1 only
	}
	made := time.Now()
	waitFor(t, 10*time.Second, "two batches", func() bool { return len(rcv.got()) >= 2 })
	got := rcv.got()
	if len(got) != 2 || len(got[0].records) != 100 || len(got[1].records) != 50 {
		var sizes []int
		for _, b := range got {
			sizes = append(sizes, len(b.records))
		}
		t.Fatalf("batch sizes %v, want [100 50]", sizes)
	}
	if got[0].at.Sub(start) >= flush {
		t.Errorf("the full batch came %v after the first send; it should not wait for the flush interval", got[0].at.Sub(start))
	}
	if got[1].at.Before(made) {
		t.Errorf("the partial batch came before the last record was made")
	}
	if got[1].at.Sub(start) < flush {
		t.Errorf("the partial batch came %v after the first record, before the %v flush interval", got[1].at.Sub(start), flush)
	}
	time.Sleep(flush)
	if n := len(rcv.got()); n != 2 {
		t.Errorf("%d batches, want 2", n)
	}
}

// TestCallbackSwitchAndTypes: the switch off sends nothing; a type list
// sends only those types.
func TestCallbackSwitchAndTypes(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	rcv := newReceiver(t)
	f.addURL(rcv.url("/types"))
	secret := f.createDevice("types-1")
	d := f.mustConnect("types-1", secret, "msg")

	off := f.send("types-1", "switch off", 60) // switch is off by default
	f.waitState(off, "delivered")
	time.Sleep(300 * time.Millisecond)            // settings apply when a record is routed, within 10 ms of it being made
	f.setCallback(`{"enabled":true,"types":[4]}`) // applies to the next record at once
	on := f.send("types-1", "only type 4", 60)
	f.waitState(on, "delivered")
	waitFor(t, 5*time.Second, "type 4 record", func() bool { return len(rcv.records()) >= 1 })
	time.Sleep(600 * time.Millisecond) // two flush intervals: anything else would have come
	for _, rec := range rcv.records() {
		if rec.MsgID != fmt.Sprint(on) || rec.Type != 4 {
			t.Errorf("received %+v; want only message %d's type 4", rec, on)
		}
	}
	f.setCallback(`{"enabled":false}`)
	n := len(rcv.records())
	f.waitState(f.send("types-1", "off again", 60), "delivered")
	time.Sleep(900 * time.Millisecond)
	if got := len(rcv.records()); got != n {
		t.Errorf("switch off, yet %d more records arrived", got-n)
	}
	_ = d
}

// TestCallbackTemporaryURL: a send's callback.url is used only when it is
// one of the app's URLs; otherwise records go to the default.
func TestCallbackTemporaryURL(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	def, other, stranger := newReceiver(t), newReceiver(t), newReceiver(t)
	f.addURL(def.url("/default"))
	f.addURL(other.url("/other"))
	f.setCallback(`{"enabled":true,"types":[1]}`)
	f.createDevice("temp-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/temp-off", `{"flag":1}`, nil)
	send := func(u string) int64 {
		var r struct{ Msgid int64 }
		f.restOK("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"temp-off","msg_body":"x","callback":{"url":%q,"params":{"u":%q}}}`, f.seq.Add(1), u, u), &r)
		return r.Msgid
	}
	toOther, toStranger := send(other.url("/other")), send(stranger.url("/stranger"))
	waitFor(t, 5*time.Second, "records", func() bool {
		return slices.Equal(other.ofMessage(toOther), []int{1}) && slices.Equal(def.ofMessage(toStranger), []int{1})
	})
	if len(stranger.got()) != 0 || len(def.ofMessage(toOther)) != 0 || len(other.ofMessage(toStranger)) != 0 {
		t.Fatalf("records went astray: default %v, other %v, stranger %d batches", def.records(), other.records(), len(stranger.got()))
	}
	if p := other.records()[0].Params; string(p) != fmt.Sprintf(`{"u":%q}`, other.url("/other")) {
		t.Errorf("params %s", p)
	}
}

// TestCallbackRetryAndDeadLetter: a failing URL is retried at the
// interval, then its batch is dead-lettered; redelivery from the list
// brings the same records once the URL works.
func TestCallbackRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t, "--callback.retry_interval", "500ms")
	rcv := newReceiver(t)
	f.addURL(rcv.url("/flaky"))
	f.setCallback(`{"enabled":true}`)
	f.createDevice("dead-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/dead-off", `{"flag":1}`, nil)
	rcv.status.Store(500)
	id := f.send("dead-off", "nobody home", 60)

	var list struct {
		DeadLetters []struct {
			ID        string `json:"id"`
			URL       string `json:"url"`
			Attempts  int    `json:"attempts"`
			LastError string `json:"last_error"`
			Records   []struct {
				ID    string `json:"id"`
				MsgID string `json:"msgid"`
			} `json:"records"`
		} `json:"dead_letters"`
	}
	waitFor(t, 10*time.Second, "dead letter", func() bool {
		f.restOK("GET", "/admin/v1/apps/"+demoKey+"/callback/deadletters", "", &list)
		return len(list.DeadLetters) == 1
	})
	got := rcv.got()
	if len(got) != 3 {
		t.Fatalf("%d attempts, want 1 + 2 retries", len(got))
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].at.Sub(got[i-1].at); gap < 450*time.Millisecond || gap > 2*time.Second {
			t.Errorf("retry %d came %v after the previous attempt, want about the 500ms interval", i, gap)
		}
		if got[i].header.Get("webhook-id") != got[0].header.Get("webhook-id") {
			t.Errorf("a retry changed webhook-id: %q vs %q", got[i].header.Get("webhook-id"), got[0].header.Get("webhook-id"))
		}
	}
	dl := list.DeadLetters[0]
	if dl.URL != rcv.url("/flaky") || dl.Attempts != 3 || !strings.Contains(dl.LastError, "500") ||
		len(dl.Records) != 1 || dl.Records[0].MsgID != fmt.Sprint(id) {
		t.Fatalf("dead letter %+v", dl)
	}

	rcv.status.Store(200)
	f.restOK("POST", "/admin/v1/apps/"+demoKey+"/callback/deadletters/"+dl.ID+"/redeliver", "", nil)
	waitFor(t, 5*time.Second, "redelivery", func() bool { return len(rcv.got()) == 4 })
	last := rcv.got()[3]
	if len(last.records) != 1 || last.records[0].ID != dl.Records[0].ID {
		t.Fatalf("redelivered %+v, want record %s again", last.records, dl.Records[0].ID)
	}
	f.restOK("GET", "/admin/v1/apps/"+demoKey+"/callback/deadletters", "", &list)
	if len(list.DeadLetters) != 0 {
		t.Fatalf("dead letters after redelivery: %+v", list.DeadLetters)
	}
}

// TestCallbackIsolation: one app's URL that hangs does not hold up
// another app's records.
func TestCallbackIsolation(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	slow, fast := newReceiver(t), newReceiver(t)
	f.addURL(slow.url("/slow"))
	f.setCallback(`{"enabled":true,"types":[1]}`)
	var other struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	f.restOK("POST", "/admin/v1/apps", `{"name":"healthy"}`, &other)
	f.restOK("POST", "/admin/v1/apps/"+other.Key+"/callback/urls", fmt.Sprintf(`{"url":%q}`, fast.url("/fast")), nil)
	f.restOK("PUT", "/admin/v1/apps/"+other.Key+"/callback", `{"enabled":true,"types":[1]}`, nil)
	f.createDevice("iso-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/iso-off", `{"flag":1}`, nil)
	// The healthy app's own device, disabled, so each send is one record.
	if st, b := f.restAs(other.Key, other.MasterSecret, "POST", "/device/v1/devices", `{"device":[{"name":"iso-other"}]}`); st != 200 {
		t.Fatalf("create in the healthy app: %d %s", st, b)
	}
	f.restOK("PATCH", "/admin/v1/apps/"+other.Key+"/devices/iso-other", `{"flag":1}`, nil)
	slow.delay.Store(int64(3 * time.Second)) // past the 1 s request timeout: every attempt fails

	for range 5 {
		f.send("iso-off", "to the slow app", 60)
	}
	waitFor(t, 5*time.Second, "the slow URL's first attempt", func() bool { return slow.attempts.Load() > 0 })
	start := time.Now()
	if st, b := f.restAs(other.Key, other.MasterSecret, "POST", "/msg/v1/msg",
		fmt.Sprintf(`{"seq_no":%d,"device_name":"iso-other","msg_body":"x"}`, f.seq.Add(1))); st != 200 {
		t.Fatalf("healthy app send: %d %s", st, b)
	}
	waitFor(t, 5*time.Second, "the healthy app's record", func() bool { return len(fast.records()) == 1 })
	// Its flush interval is 300 ms; a hanging URL's attempt lasts 1 s.
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("the healthy app's record took %v while another app's URL hung", d)
	}
}

// TestCallbackSettingsApplyToQueued: records already queued for a URL
// follow later changes: they move to the default when their URL is
// deleted, and stop when the switch goes off.
func TestCallbackSettingsApplyToQueued(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t, "--callback.max_retries", "1000")
	def, gone := newReceiver(t), newReceiver(t)
	f.addURL(def.url("/default"))
	f.addURL(gone.url("/gone"))
	f.setCallback(`{"enabled":true,"types":[1]}`)
	f.createDevice("queued-off")
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/queued-off", `{"flag":1}`, nil)
	gone.status.Store(500)
	var r struct{ Msgid int64 }
	f.restOK("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"queued-off","msg_body":"x","callback":{"url":%q}}`, f.seq.Add(1), gone.url("/gone")), &r)
	waitFor(t, 5*time.Second, "failed attempts at the temporary URL", func() bool { return gone.attempts.Load() >= 2 })
	f.restOK("DELETE", "/admin/v1/apps/"+demoKey+"/callback/urls?url="+gone.url("/gone"), "", nil)
	waitFor(t, 5*time.Second, "the record at the default URL", func() bool { return slices.Equal(def.ofMessage(r.Msgid), []int{1}) })
	after := gone.attempts.Load()

	// The switch goes off while the default URL fails: the retries stop.
	def.status.Store(500)
	f.send("queued-off", "y", 60)
	waitFor(t, 5*time.Second, "a failed attempt", func() bool { return def.attempts.Load() >= 3 })
	f.setCallback(`{"enabled":false}`)
	time.Sleep(400 * time.Millisecond) // an attempt may be in flight
	n := def.attempts.Load()
	time.Sleep(1200 * time.Millisecond) // four retry intervals
	if m := def.attempts.Load(); m != n {
		t.Errorf("switch off, yet %d more attempts", m-n)
	}
	if g := gone.attempts.Load(); g != after {
		t.Errorf("the deleted URL got %d more attempts", g-after)
	}
}

// TestCallbackRecordsMatchMessageRecords: every record of a message, in
// the answers of GET and DELETE /msg/v1/msg, is the record the callback
// receiver got with the same id, field for field; the id is
// <msgid>-<index of the record in the message>.
func TestCallbackRecordsMatchMessageRecords(t *testing.T) {
	t.Parallel()
	f := callbackFleet(t)
	rcv := newReceiver(t)
	f.addURL(rcv.url("/ids"))
	f.setCallback(`{"enabled":true}`)
	f.createDevice("ids-1")

	withParams := fmt.Sprintf(`{"seq_no":%d,"device_name":"ids-1","msg_body":"hi","ttl":60,"callback":{"params":{"order":"<A&1>"}}}`, f.seq.Add(1))
	var sent struct{ Msgid int64 }
	f.restOK("POST", "/msg/v1/msg", withParams, &sent)
	id := sent.Msgid
	waitRecordTypes(t, f, rcv, map[int64][]int{id: {0, 2}}, 10*time.Second)
	var retracted struct{ Records []json.RawMessage }
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "", &retracted)
	waitRecordTypes(t, f, rcv, map[int64][]int{id: {0, 2, 7}}, 10*time.Second)
	var got struct{ Records []json.RawMessage }
	f.restOK("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "", &got)

	delivered := map[string]map[string]any{}
	for _, b := range rcv.got() {
		var recs []json.RawMessage
		if err := json.Unmarshal(b.body, &recs); err != nil {
			t.Fatalf("callback body %s: %v", b.body, err)
		}
		for _, raw := range recs {
			rec := decodeObject(t, raw)
			delivered[rec["id"].(string)] = rec
		}
	}
	for name, answer := range map[string][]json.RawMessage{"GET": got.Records, "DELETE": retracted.Records} {
		if len(answer) != 3 {
			t.Fatalf("%s answer: %d records, want 3", name, len(answer))
		}
		for i, raw := range answer {
			rec := decodeObject(t, raw)
			wantID := fmt.Sprintf("%d-%d", id, i)
			if rec["id"] != wantID {
				t.Errorf("%s record %d: id %v, want %q", name, i, rec["id"], wantID)
			}
			if cb, ok := delivered[wantID]; !ok {
				t.Errorf("%s record %s: the receiver got no record with its id (got %v)", name, raw, slices.Sorted(maps.Keys(delivered)))
			} else if !reflect.DeepEqual(rec, cb) {
				t.Errorf("%s record %s, the callback delivered %v", name, raw, cb)
			}
		}
	}
}

// decodeObject decodes a JSON object, numbers as json.Number.
func decodeObject(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("record %s: %v", raw, err)
	}
	return m
}
