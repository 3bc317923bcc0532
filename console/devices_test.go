package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
)

func TestBatchCreateFromList(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "taken-01")
	b := e.browser()
	b.loginAdmin() // an admin session: the console fetches the app's secret
	base := "/console/apps/" + a.Key
	b.get(base + "/devices")
	p := b.post(base+"/devices", url.Values{"list": {"dev-0001, kitchen\r\n\r\nx\ndev-0002\ndev-0001\ntaken-01\n"}})
	p.want(t, 200, `id="devices-create-results"`)
	if got := p.text("devices-create-summary"); !strings.HasPrefix(got, "2 created, 3 failed") {
		t.Errorf("summary %q", got)
	}
	rows := resultRows(p)
	want := []string{"1 dev-0001 0 created", "3 x 1003 device name", "4 dev-0002 0 created", "5 dev-0001 3001", "6 taken-01 3001"}
	if len(rows) != len(want) {
		t.Fatalf("rows %q", rows)
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w) {
			t.Errorf("row %d: %q, want prefix %q", i, rows[i], w)
		}
	}
	// The created ones show their secret, which works.
	secrets := regexp.MustCompile(`class="result-secret"><code>([A-Za-z0-9]{32})</code>`).FindAllStringSubmatch(p.body, -1)
	if len(secrets) != 2 {
		t.Fatalf("%d secrets shown", len(secrets))
	}
	var base1 apitypes.BaseInfo
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &base1)
	if base1.DeviceSecret != secrets[0][1] {
		t.Errorf("shown secret %q, stored %q", secrets[0][1], base1.DeviceSecret)
	}
	var dev struct{ Device struct{ Mark string } }
	e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/devices/dev-0001", nil, &dev)
	if dev.Device.Mark != "kitchen" {
		t.Errorf("mark %q", dev.Device.Mark)
	}
	// Shown once.
	p = b.get(base + "/devices")
	if p.has(secrets[0][1]) || p.has(`id="devices-create-results"`) {
		t.Error("the results are shown again")
	}
	p.want(t, 200, `data-device="dev-0001"`, `data-device="dev-0002"`)

	b.post(base+"/devices", url.Values{"list": {"\n \n"}}).want(t, 200, "Paste device names")
}

// resultRows returns the batch results' cells, space separated, per row.
func resultRows(p page) []string {
	tbody := p.body[strings.Index(p.body, `id="devices-create-results"`):]
	tbody = tbody[:strings.Index(tbody, "</table>")]
	var rows []string
	for _, tr := range regexp.MustCompile(`(?s)<tr data-device.*?</tr>`).FindAllString(tbody, -1) {
		cells := regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(tr, -1)
		var parts []string
		for _, c := range cells {
			parts = append(parts, strings.TrimSpace(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], "")))
		}
		rows = append(rows, strings.Join(parts, " "))
	}
	return rows
}

func TestBatchCreateFromCSV(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key
	b.get(base + "/devices")
	csv := "\xef\xbb\xbfname,mark\ncsv-0001,a\n\"csv-0002\",\"hall, upstairs\"\n\ncsv-0003,x,y\n"
	p := b.upload(base+"/devices", nil, "file", "devices.csv", csv)
	p.want(t, 200, `id="devices-create-results"`, "devices.csv")
	rows := resultRows(p)
	want := []string{"2 csv-0001 0 created", "3 csv-0002 0 created", "5 csv-0003 1003 expected name,mark; this line has 3 fields"}
	if len(rows) != len(want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(rows[i], w) {
			t.Errorf("row %d: %q, want prefix %q", i, rows[i], w)
		}
	}
	var dev struct{ Device struct{ Mark string } }
	e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/devices/csv-0002", nil, &dev)
	if dev.Device.Mark != "hall, upstairs" {
		t.Errorf("mark %q", dev.Device.Mark)
	}
	// A list and a file in one submission.
	p = b.upload(base+"/devices", map[string]string{"list": "both-0001"}, "file", "more.csv", "both-0002\n")
	if got := p.text("devices-create-summary"); !strings.HasPrefix(got, "2 created, 0 failed") {
		t.Errorf("summary %q", got)
	}
}

func TestDeviceListPaging(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	var names []string
	for i := range 120 {
		names = append(names, fmt.Sprintf("dev-%04d", i))
	}
	e.createDevices(a, names...)
	e.createDevices(a, "other-01")
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key + "/devices"
	p := b.get(base)
	if n := strings.Count(p.body, `<tr data-device=`); n != devicesPerPage {
		t.Fatalf("first page has %d devices", n)
	}
	next := regexp.MustCompile(`id="devices-next" href="([^"]+)"`).FindStringSubmatch(p.body)
	if next == nil {
		t.Fatal("no next page link")
	}
	p = b.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	p.want(t, 200, `data-device="dev-0050"`, `id="devices-first"`)
	if p.has(`data-device="dev-0049"`) {
		t.Error("the second page repeats the first")
	}
	p = b.get(base + "?prefix=other")
	if n := strings.Count(p.body, `<tr data-device=`); n != 1 || !p.has(`data-device="other-01"`) || p.has(`id="devices-next"`) {
		t.Errorf("prefix search: %d rows:\n%s", n, p.body)
	}
	p = b.get(base + "?prefix=nothing")
	p.want(t, 200, `id="devices-empty"`)
}

func TestDevicePageAndDesiredProperty(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginAdmin()
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	p := b.get(dev)
	p.want(t, 200, `id="device-properties"`)
	if p.text("device-status") != "offline" || p.text("device-flag") != "enabled" || p.text("device-last-login") != "never" || p.text("device-desired-version") != "1" {
		t.Fatalf("base info: status %q flag %q login %q version %q", p.text("device-status"), p.text("device-flag"), p.text("device-last-login"), p.text("device-desired-version"))
	}
	p = b.post(dev+"/property", url.Values{"name": {"temp"}, "value": {"21.5"}, "version": {"1"}})
	p.want(t, 200, "Desired temp set (version 1", `data-property="temp"`)
	if p.text("device-desired-version") != "2" {
		t.Errorf("version after a set: %q", p.text("device-desired-version"))
	}
	b.post(dev+"/property", url.Values{"name": {"mode"}, "value": {"eco"}, "version": {"2"}})
	b.post(dev+"/property", url.Values{"name": {"code"}, "value": {"42"}, "version": {"3"}, "as_string": {"1"}})
	// A stale version is the API's 6003, explained.
	p = b.post(dev+"/property", url.Values{"name": {"temp"}, "value": {"1"}, "version": {"1"}})
	p.want(t, 200, "Not applied: 6003 version invalid.")

	var out apitypes.PropertySummary
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/property?device_name=dev-0001", nil, &out)
	raw := map[string]string{}
	for _, p := range out.Properties {
		raw[p.Name] = string(p.DesiredValue)
	}
	if want := map[string]string{"temp": "21.5", "mode": `"eco"`, "code": `"42"`}; fmt.Sprint(raw) != fmt.Sprint(want) {
		t.Errorf("desired values %v, want %v", raw, want)
	}
	p = b.get(dev)
	if !strings.Contains(p.body, `<td class="prop-desired"><code>&#34;eco&#34;</code></td>`) {
		t.Errorf("the property table does not show the string value as JSON:\n%s", p.body)
	}
}

func TestDeviceFlagAndDelete(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	b.get(dev)
	p := b.post(dev+"/flag", url.Values{"flag": {"1"}})
	p.want(t, 200, "Device disabled", `id="device-enable"`)
	if p.text("device-flag") != "disabled" {
		t.Errorf("flag %q", p.text("device-flag"))
	}
	b.post(dev+"/flag", url.Values{"flag": {"0"}}).want(t, 200, "Device enabled.", `id="device-disable"`)

	b.post(dev+"/delete", nil).want(t, 200, "Tick the box to confirm")
	p = b.post(dev+"/delete", url.Values{"confirm": {"1"}})
	if p.url != "/console/apps/"+a.Key+"/devices" {
		t.Fatalf("after delete: %s", p.url)
	}
	p.want(t, 200, "Device dev-0001 deleted.")
	b.get(dev).want(t, http.StatusNotFound, `device &#34;dev-0001&#34; not found`)
}

// TestLongPropertyFolded: a long value shows its first bytes with the
// whole value in a <details>; a short one is shown as is.
func TestLongPropertyFolded(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	long := strings.Repeat("é", 30) + strings.Repeat("x", 200)
	e.apiCall(a.Key, a.Secret, "POST", "/device/v1/property", map[string]any{"seq_no": 1, "device_name": "dev-0001", "version": 1,
		"properties": []map[string]any{{"name": "blob", "value": long}, {"name": "led", "value": "on"}}}, nil)
	b := e.browser()
	b.loginApp(a)
	p := b.get("/console/apps/" + a.Key + "/devices/dev-0001")
	row := regexp.MustCompile(`(?s)<tr data-property="blob">.*?</tr>`).FindString(p.body)
	// 40 bytes: the opening quote and 19 two-byte runes, never half a rune.
	want := `<details class="fold"><summary><code>&#34;` + strings.Repeat("é", 19) + `</code>… <span class="hint">(262 bytes)</span></summary><code class="fold-full">&#34;` + long + `&#34;</code></details>`
	if !strings.Contains(row, want) {
		t.Errorf("the long value is not folded as expected:\n%s\nwant %s", row, want)
	}
	if !p.has(`<td class="prop-desired"><code>&#34;on&#34;</code></td>`) {
		t.Errorf("a short value is folded:\n%s", regexp.MustCompile(`(?s)<tr data-property="led">.*?</tr>`).FindString(p.body))
	}
}

// TestMessageBoxBytes: the form counts bytes (data-max-bytes), not UTF-16
// units (maxlength), and line breaks reach the device as \n.
func TestMessageBoxBytes(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	p := b.get(dev)
	box := regexp.MustCompile(`<textarea id="device-message-body"[^>]*>`).FindString(p.body)
	if !strings.Contains(box, `data-max-bytes="2048"`) || strings.Contains(box, "maxlength") {
		t.Errorf("message box %s: want data-max-bytes=2048 and no maxlength", box)
	}
	p = b.post(dev+"/message", url.Values{"msg_body": {"line 1\r\nline 2"}, "ttl": {"60"}})
	p.want(t, 200, "Message stored; msgid")
	var id int64
	fmt.Sscan(p.text("device-message-msgid"), &id)
	m, err := e.st.GetMessage(context.Background(), a.Key, id)
	if err != nil || m.Body != "line 1\nline 2" {
		t.Fatalf("stored body %q (%v), want the line break as \\n", m.Body, err)
	}
	// 2048 bytes of two-byte runes pass; one more rune is the API's error.
	b.post(dev+"/message", url.Values{"msg_body": {strings.Repeat("é", 1024)}}).want(t, 200, "Message stored; msgid")
	b.post(dev+"/message", url.Values{"msg_body": {strings.Repeat("é", 1025)}}).want(t, 200, "msg_body must be 1 to 2048 bytes, got 2050")
}

func TestDeviceTags(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	e.createDevices(a, "dev-0001")
	b := e.browser()
	b.loginApp(a)
	dev := "/console/apps/" + a.Key + "/devices/dev-0001"
	if p := b.get(dev); p.text("device-tags") != "—" {
		t.Fatalf("tags of an untagged device %q", p.text("device-tags"))
	}
	p := b.post(dev+"/tags", url.Values{"tags": {"lamp, floor:1  lamp"}})
	p.want(t, 200, "Tags saved", `value="floor:1 lamp"`)
	if got := p.text("device-tags"); !strings.Contains(got, "floor:1") || !strings.Contains(got, "lamp") {
		t.Errorf("tags shown %q", got)
	}
	var info struct{ Tags []string }
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &info)
	if fmt.Sprint(info.Tags) != "[floor:1 lamp]" {
		t.Errorf("stored tags %v", info.Tags)
	}
	b.post(dev+"/tags", url.Values{"tags": {"a/b"}}).want(t, 200, "tags[0]")
	b.post(dev+"/tags", url.Values{"tags": {""}}).want(t, 200, "Tags saved (0)")
	e.apiCall(a.Key, a.Secret, "GET", "/device/v1/baseinfo?device_name=dev-0001", nil, &info)
	if len(info.Tags) != 0 {
		t.Errorf("tags after clearing %v", info.Tags)
	}
}

// TestDeviceSparklines: the device page draws a sparkline per numeric
// field of the device's recent telemetry and reported properties, from
// the event log, and not another device's.
func TestDeviceSparklines(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("sparks")
	e.createDevices(a, "dev-1", "dev-2")
	var evs []store.Event
	for i := range 80 {
		evs = append(evs,
			upEvent(a, "dev-1", "up/temp", strconv.Itoa(20+i%5)),
			upEvent(a, "dev-1", "up", fmt.Sprintf(`{"hum":%d,"batt":{"mv":%d},"label":"x"}`, 40+i, 3000-i)),
			upEvent(a, "dev-2", "up/temp", "99"),
			upEvent(a, "dev-1", "up/raw", "\x01\x02"),
			events.New(events.TypeReported, a.Key, "dev-1", time.Now(), events.Reported{Version: int64(i + 1),
				Properties: map[string]json.RawMessage{"level": json.RawMessage(strconv.Itoa(i)), "mode": json.RawMessage(`"eco"`)}}),
		)
	}
	e.appendEvents(evs...)
	b := e.browser()
	b.loginApp(a)
	p := b.get("/console/apps/" + a.Key + "/devices/dev-1")
	rows := regexp.MustCompile(`<tr data-source="(\w+)" data-field="([^"]+)">.*?<span class="spark" data-series="[^"]+" data-points="(\d+)">.*?<b class="spark-last">([^<]*)</b>`).FindAllStringSubmatch(p.body, -1)
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join(r[1:], " "))
	}
	want := []string{
		"telemetry batt.mv 60 2921",
		"telemetry hum 60 119",
		"telemetry temp 60 24",
		"property level 60 79",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sparklines (source field points last):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A device with no numbers says so.
	p = b.get("/console/apps/" + a.Key + "/devices/dev-2")
	if !p.has(`data-field="temp"`) || !p.has(`<b class="spark-last">99</b>`) {
		t.Errorf("dev-2's own telemetry is not drawn")
	}
	// Values further back than the first look: the page looks further.
	var noise []store.Event
	for range 3 * trendSpan {
		noise = append(noise, upEvent(a, "dev-2", "up/temp", "98"))
	}
	e.appendEvents(noise...)
	p = b.get("/console/apps/" + a.Key + "/devices/dev-1")
	if !p.has(`data-field="hum"`) || !p.has(`<b class="spark-last">119</b>`) {
		t.Errorf("values %d events back are not drawn", 3*trendSpan)
	}
	e.createDevices(a, "dev-3")
	p = b.get("/console/apps/" + a.Key + "/devices/dev-3")
	if !p.has(`id="device-sparks-none"`) {
		t.Errorf("a device without telemetry shows sparklines:\n%s", p.body)
	}
}
