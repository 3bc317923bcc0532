package console

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/apitypes"
)

func TestMessageAndTrace(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginAdmin()
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	b.get(dev)
	p := b.post(dev+"/message", url.Values{"msg_body": {"hello"}, "ttl": {"3600"}})
	p.want(t, 200, "Message stored; msgid")
	msgid := p.text("device-message-msgid")
	if n, err := strconv.ParseInt(msgid, 10, 64); err != nil || n <= 0 || n > 1<<53-1 {
		t.Fatalf("msgid %q", msgid)
	}
	link := regexp.MustCompile(`id="device-message-trace" href="([^"]+)"`).FindStringSubmatch(p.body)
	if link == nil || link[1] != "/console/apps/"+a.Key+"/messages?msgid="+msgid {
		t.Fatalf("trace link %v", link)
	}
	p = b.get(link[1])
	p.want(t, 200, `id="trace-records"`, `id="trace-retract"`)
	if p.text("trace-state") != "pending" || p.text("trace-device") != "dev-0001" {
		t.Errorf("state %q device %q", p.text("trace-state"), p.text("trace-device"))
	}
	if types := regexp.MustCompile(`class="record-type">([^<]+)<`).FindAllStringSubmatch(p.body, -1); len(types) != 2 ||
		types[0][1] != "0 target valid" || types[1][1] != "2 submission success" {
		t.Errorf("records %v", types)
	}
	// Each record shows the id its callback carries.
	if ids := regexp.MustCompile(`class="record-id"><code>([^<]+)<`).FindAllStringSubmatch(p.body, -1); len(ids) != 2 ||
		ids[0][1] != msgid+"-0" || ids[1][1] != msgid+"-1" {
		t.Errorf("record ids %v, want %s-0 and %s-1", ids, msgid, msgid)
	}

	p = b.post("/console/apps/"+a.Key+"/messages/retract", url.Values{"msgid": {msgid}})
	p.want(t, 200, "Message retracted")
	if p.text("trace-state") != "retracted" || p.has(`id="trace-retract"`) {
		t.Errorf("after retracting: state %q", p.text("trace-state"))
	}
	// Retracting again is refused with record 8 and its reason.
	p = b.post("/console/apps/"+a.Key+"/messages/retract", url.Values{"msgid": {msgid}})
	p.want(t, 200, "Not retracted", "(record 8)")

	// A bad msgid is shown by the form, not as an error page.
	p = b.get("/console/apps/" + a.Key + "/messages?msgid=12x")
	p.want(t, 200, `id="trace-error"`)
	b.post(dev+"/message", url.Values{"msg_body": {""}}).want(t, 200, `class="flash flash-error"`)
}

// TestRecentMessages lists an app's messages newest first, 50 a page, each
// linking to its trace.
func TestRecentMessages(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	other := e.createApp("orchard")
	e.createDevices(a, "dev-0001", "dev-0002")
	e.createDevices(other, "dev-0001")
	var ids []string
	for i := range messagesPerPage + 10 {
		var out apitypes.SendAnswer
		ttl := 60 * (i % 2) // ttl 0 to an offline device fails at once
		e.apiCall(a.Key, a.Secret, "POST", "/msg/v1/msg", map[string]any{"seq_no": i + 1, "device_name": fmt.Sprintf("dev-000%d", i%2+1), "msg_body": "m", "ttl": ttl}, &out)
		ids = append(ids, fmt.Sprint(out.MsgID))
	}
	e.apiCall(other.Key, other.Secret, "POST", "/msg/v1/msg", map[string]any{"seq_no": 1, "device_name": "dev-0001", "msg_body": "elsewhere"}, nil)
	b := e.browser()
	b.loginApp(a)
	list := "/console/apps/" + a.Key + "/messages"
	p := b.get(list)
	rows := regexp.MustCompile(`<tr data-msgid="(\d+)">`).FindAllStringSubmatch(p.body, -1)
	if len(rows) != messagesPerPage || rows[0][1] != ids[len(ids)-1] || rows[1][1] != ids[len(ids)-2] {
		t.Fatalf("first page: %d rows starting %v, want %d newest first", len(rows), rows[:min(2, len(rows))], messagesPerPage)
	}
	newest := regexp.MustCompile(`(?s)<tr data-msgid="` + ids[len(ids)-1] + `">.*?</tr>`).FindString(p.body)
	for _, want := range []string{`href="/console/apps/` + a.Key + `/messages?msgid=` + ids[len(ids)-1] + `"`, "dev-0002", "state-pending", "<time datetime="} {
		if !strings.Contains(newest, want) {
			t.Errorf("the newest row lacks %q:\n%s", want, newest)
		}
	}
	if row := regexp.MustCompile(`(?s)<tr data-msgid="` + ids[len(ids)-2] + `">.*?</tr>`).FindString(p.body); !strings.Contains(row, "state-failed") {
		t.Errorf("a ttl-0 message to an offline device shows as:\n%s", row)
	}
	next := regexp.MustCompile(`id="messages-next" href="([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil {
		t.Fatal("no link to older messages")
	}
	p = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	p.want(t, 200, `id="messages-first"`)
	rows = regexp.MustCompile(`<tr data-msgid="(\d+)">`).FindAllStringSubmatch(p.body, -1)
	if len(rows) != 10 || rows[9][1] != ids[0] || p.has(`id="messages-next"`) {
		t.Fatalf("second page: %d rows %v", len(rows), rows)
	}
	p = b.get(list + "?msgid=" + ids[0])
	p.want(t, 200, `id="trace-records"`, `id="messages-all"`)
	if p.has(`id="messages-table"`) {
		t.Error("the trace page also lists messages")
	}
	// Another app's owner sees only theirs.
	o := e.browser()
	o.loginApp(other)
	p = o.get("/console/apps/" + other.Key + "/messages")
	if n := strings.Count(p.body, `<tr data-msgid=`); n != 1 {
		t.Errorf("the other app lists %d messages", n)
	}
	e2 := newEnv(t)
	a2 := e2.createApp("empty")
	b2 := e2.browser()
	b2.loginApp(a2)
	b2.get("/console/apps/"+a2.Key+"/messages").want(t, 200, `id="messages-empty"`)
}

func TestProgressChart(t *testing.T) {
	start := time.Unix(1_790_000_000, 0)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	if c := progressChart(start, nil); c.points() != 0 {
		t.Fatalf("no samples drew %d points", c.points())
	}
	c := progressChart(start, []progressSample{{at(5), 5, 1, 0}, {at(29), 5, 4, 1}})
	if c.points() != progressBuckets {
		t.Fatalf("%d points, want %d", c.points(), progressBuckets)
	}
	d := c.Series[1].Values
	// One step a second from the acceptance (first read soon after):
	// 0 until the first read at 5 s, then the counts read last.
	if d[0] != 0 || d[4] != 0 || d[5] != 1 || d[28] != 1 || d[29] != 4 || c.From != "14:13:20" {
		t.Errorf("delivered %v from %s", d, c.From)
	}
	// First read long after the acceptance: the chart starts there.
	c = progressChart(start, []progressSample{{at(3600), 5, 1, 0}, {at(3629), 5, 4, 1}})
	if d := c.Series[1].Values; d[0] != 1 || d[29] != 4 || c.From != "15:13:20" {
		t.Errorf("delivered %v from %s", d, c.From)
	}
	l := newProgressLog()
	for i := range progressSamples + 1 {
		l.record("a/1", progressSample{At: at(i)})
	}
	if run := l.record("a/1", progressSample{At: at(1000)}); len(run) > progressSamples || run[len(run)-1].At != at(1000) {
		t.Errorf("kept %d samples, the last at %v", len(run), run[len(run)-1].At)
	}
	for i := range progressKept + 5 {
		l.record(fmt.Sprint("b/", i), progressSample{At: at(2000 + i)})
	}
	if len(l.runs) != progressKept {
		t.Errorf("kept %d broadcasts, want %d", len(l.runs), progressKept)
	}
}

func TestBroadcastPage(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/devices", map[string]any{"device": []map[string]any{
		{"name": "lamp-0001", "tags": []string{"lamp"}}, {"name": "lamp-0002", "tags": []string{"lamp"}}, {"name": "plug-0001"},
	}}, nil)
	b := e.browser()
	b.loginApp(a)
	page := "/console/apps/" + a.Key + "/broadcast"
	b.get(page).want(t, 200, `id="broadcast-form"`, `id="nav-broadcast"`)
	b.post(page, url.Values{"target": {"tag"}, "tag": {""}, "msg_body": {"x"}}).want(t, 200, "Name a tag")
	b.post(page, url.Values{"target": {"tag"}, "tag": {"a b"}, "msg_body": {"x"}}).want(t, 200, "target.tag")
	p := b.post(page, url.Values{"target": {"tag"}, "tag": {"lamp"}, "msg_body": {"refresh"}, "ttl": {"600"}})
	p.want(t, 200, "accepted for 2 devices", `id="broadcast-progress"`, `data-live="2"`, `id="broadcast-bar-queued"`)
	if !strings.Contains(p.url, "?id=") {
		t.Fatalf("after the form: %s", p.url)
	}
	id := p.text("broadcast-id")
	// Delivery over time: drawn from the counts this console read.
	time.Sleep(10 * time.Millisecond)
	p = b.get(page + "?id=" + id)
	if polyline(p.body, "broadcast-chart", "queued") == "" || legendValue(p.body, "broadcast-chart", "delivered") != "0" {
		t.Errorf("no delivery chart:\n%s", p.body)
	}
	p = b.post(page+"/cancel", url.Values{"id": {id}})
	p.want(t, 200, "Broadcast cancelled")
	if p.text("broadcast-state") != "cancelled" {
		t.Errorf("state after cancel %q", p.text("broadcast-state"))
	}
	if p.has(`id="broadcast-cancel"`) {
		t.Error("a cancelled broadcast still offers the cancel button")
	}
	b.get(page+"?id=12345").want(t, 200, "broadcast 12345 not found")
	all := b.post(page, url.Values{"target": {"all"}, "msg_body": {"all"}})
	all.want(t, 200, "accepted for 3 devices")
}
