package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestCrashLoopBatch kills the server with SIGKILL again and again while
// clients make batch sends (POST /msg/v1/msgs), each retried with its
// seq_no and body until answered, and then checks, on a last start:
//   - lost: a msgid a 200 gave that GET /msg/v1/msg does not know, or
//     knows for another device;
//   - unstable: a retry answered with other results than the first 200
//     (a replay must give the same msgids);
//   - duplicated: one msgid given to two (batch, device) pairs.
//
// All must be 0. DEVMSG_CRASH_CYCLES sets the cycles (default 5).
func TestCrashLoopBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cycles := envInt(t, envCrashCycles, 5)
	const clients, devices = 4, 10
	dir := t.TempDir()
	p := startProc(t, dir)
	app := p.createApp(t, "crashbatch")
	names, _ := createDevices(t, p, app, "batch-", devices)
	quoted := make([]string, devices)
	for i, name := range names {
		quoted[i] = fmt.Sprintf("%q", name)
	}

	var mu sync.Mutex
	var answered []*batchReq
	var unstable []string
	// send makes one attempt at b; it reports false when the server is gone.
	send := func(p *proc, b *batchReq) bool {
		st, body, err := p.tryCall(app.Key, app.MasterSecret, "POST", "/msg/v1/msgs",
			fmt.Sprintf(`{"seq_no":%d,"device_names":[%s],"msg_body":%q,"ttl":3600}`, b.seq, strings.Join(quoted, ","), b.body))
		if err != nil {
			return false
		}
		if st != 200 {
			t.Errorf("batch %s: %d %s", b.body, st, body)
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case b.resp == "":
			b.resp = string(body)
			answered = append(answered, b)
		case b.resp != string(body):
			unstable = append(unstable, fmt.Sprintf("batch %s answered %s, then %s", b.body, b.resp, body))
		}
		return true
	}
	pending := make([][]*batchReq, clients)
	nextSeq := make([]int64, clients)
	sends, retries := 0, 0
	for cycle := range cycles {
		if cycle > 0 {
			p = startProc(t, dir)
		}
		s, r := crashClients(t, p, pending, send, func(c int) *batchReq {
			nextSeq[c]++
			b := &batchReq{seq: int64(c)*1_000_000 + nextSeq[c]}
			b.body = fmt.Sprintf("c%d-s%d", c, b.seq)
			return b
		})
		sends += s
		retries += r
		if t.Failed() {
			return
		}
	}

	// The last start: the unanswered batches are retried until answered,
	// then every answer is checked against the store.
	p = startProc(t, dir)
	retries += retryPending(t, p, pending, send, func(b *batchReq) string { return b.body })
	lost := checkBatchAnswers(t, p, app, names, answered)
	t.Logf("%d cycles, %d clients, %d devices a batch: %d batches, %d retries, %d answered; lost %d, unstable %d",
		cycles, clients, devices, sends, retries, len(answered), len(lost), len(unstable))
	reportProblems(t, lost, unstable)
}

// batchReq is one batch send of TestCrashLoopBatch: it keeps its seq_no and
// body through every retry.
type batchReq struct {
	seq  int64
	body string
	resp string // the first 200's body; "" while unanswered
}

// checkBatchAnswers checks every answered batch against p: each result
// names its device in request order with a msgid, no msgid is given
// twice, and GET /msg/v1/msg knows each msgid for its device. It returns
// the msgids lost.
func checkBatchAnswers(t *testing.T, p *proc, app testApp, names []string, answered []*batchReq) []string {
	t.Helper()
	var lost []string
	owner := map[int64]string{} // msgid → batch and device
	for _, b := range answered {
		var r struct {
			Resp []struct {
				DeviceName string `json:"device_name"`
				Code       int    `json:"code"`
				MsgID      int64  `json:"msgid"`
			} `json:"resp"`
		}
		if err := json.Unmarshal([]byte(b.resp), &r); err != nil || len(r.Resp) != len(names) {
			t.Fatalf("batch %s answered %s", b.body, b.resp)
		}
		for i, e := range r.Resp {
			if e.DeviceName != names[i] || e.MsgID == 0 || (e.Code != 0 && e.Code != 3004) {
				t.Fatalf("batch %s: result %d is %+v", b.body, i, e)
			}
			k := b.body + "/" + e.DeviceName
			if o, ok := owner[e.MsgID]; ok {
				t.Errorf("msgid %d answered for %s and for %s", e.MsgID, o, k)
			}
			owner[e.MsgID] = k
			st, mb := p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", e.MsgID), "")
			var m struct {
				DeviceName string `json:"device_name"`
			}
			if st != 200 || json.Unmarshal(mb, &m) != nil || m.DeviceName != e.DeviceName {
				lost = append(lost, fmt.Sprintf("batch %s: msgid %d of %s answered 200, then %d %s", b.body, e.MsgID, e.DeviceName, st, mb))
			}
		}
	}
	return lost
}
