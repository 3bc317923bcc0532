package console

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/message"
)

type devicesData struct {
	Prefix  string
	Cursor  string
	Devices []apitypes.DeviceSummary
	Next    string
}

func (c *Console) devicesPage(q *req) error {
	d := devicesData{Prefix: q.r.URL.Query().Get("prefix"), Cursor: q.r.URL.Query().Get("cursor")}
	query := url.Values{"limit": {strconv.Itoa(devicesPerPage)}}
	if d.Prefix != "" {
		query.Set("prefix", d.Prefix)
	}
	if d.Cursor != "" {
		query.Set("cursor", d.Cursor)
	}
	// The API pages by cursor over the name index, so a page costs the
	// same with a million devices as with ten.
	var page apitypes.DevicePage
	if err := q.api(http.MethodGet, q.appPath("/devices"), query, nil, &page); err != nil {
		return err
	}
	d.Devices, d.Next = page.Devices, page.NextCursor
	return q.render(http.StatusOK, "devices", "Devices", "devices", d)
}

// batchLine is one line of a batch create and its outcome.
type batchLine struct {
	Line    int
	Name    string
	Mark    string
	Code    int
	Message string
	Secret  string // only when created
}

type batchResult struct {
	Lines   []batchLine
	Created int
	Failed  int
	Source  string // "list" or the uploaded file's name
}

// createDevices serves the batch-create form: a pasted list (one name per
// line, optional ",mark"), an uploaded CSV file (name,mark), or both.
func (c *Console) createDevices(q *req) (string, error) {
	back := q.consolePath("/devices")
	var lines []batchLine
	var sources []string
	if list := q.r.PostFormValue("list"); strings.TrimSpace(list) != "" {
		lines = append(lines, parseList(list)...)
		sources = append(sources, "pasted list")
	}
	if f, hdr, err := q.r.FormFile("file"); err == nil {
		fileLines, err := parseCSV(f)
		f.Close()
		if err != nil {
			return back, userErrorf("%s: %v", hdr.Filename, err)
		}
		lines = append(lines, fileLines...)
		sources = append(sources, hdr.Filename)
	} else if !errors.Is(err, http.ErrMissingFile) && !errors.Is(err, http.ErrNotMultipart) {
		return back, userErrorf("The file could not be read: %v", err)
	}
	if len(lines) == 0 {
		return back, userErrorf("Paste device names (one per line) or choose a CSV file.")
	}
	if len(lines) > maxBatchLines {
		return back, userErrorf("At most %d devices at a time; this has %d lines.", maxBatchLines, len(lines))
	}
	res := &batchResult{Source: strings.Join(sources, " and ")}
	// Lines the parser refused keep their message; the rest go to the API,
	// at most 1000 per call (its limit).
	var pending []int
	for i := range lines {
		if lines[i].Message == "" {
			pending = append(pending, i)
		}
	}
	for start := 0; start < len(pending); start += 1000 {
		chunk := pending[start:min(start+1000, len(pending))]
		devs := make([]apitypes.NewDevice, len(chunk))
		for j, i := range chunk {
			devs[j] = apitypes.NewDevice{Name: lines[i].Name, Mark: lines[i].Mark}
		}
		var out apitypes.CreateDevicesAnswer
		if err := q.appAPI(http.MethodPost, "/device/v1/devices", nil, apitypes.CreateDevicesRequest{Device: devs}, &out); err != nil {
			if start == 0 {
				return back, err
			}
			// Earlier chunks were created: their secrets must be shown.
			for _, i := range pending[start:] {
				lines[i].Code, lines[i].Message = -1, "not sent: "+err.Error()
			}
			break
		}
		for j, i := range chunk {
			if j >= len(out.Resp) {
				break
			}
			r := out.Resp[j]
			lines[i].Code, lines[i].Message, lines[i].Secret = r.Code, r.Message, r.DeviceSecret
		}
	}
	for _, l := range lines {
		if l.Secret != "" {
			res.Created++
		} else {
			res.Failed++
		}
	}
	res.Lines = lines
	kind := "ok"
	if res.Failed > 0 {
		kind = "error"
	}
	c.setFlash(q.s.id, &flash{
		Kind:    kind,
		Message: fmt.Sprintf("%d created, %d failed. Copy the device secrets now: this list is shown once.", res.Created, res.Failed),
		Batch:   res,
	})
	return back, nil
}

// parseList reads a pasted list: one device per line, "name" or
// "name,mark" (the mark is everything after the first comma); blank lines
// are skipped.
func parseList(text string) []batchLine {
	var out []batchLine
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), maxFormBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		name, mark, _ := strings.Cut(line, ",")
		out = append(out, batchLine{Line: n, Name: strings.TrimSpace(name), Mark: strings.TrimSpace(mark)})
	}
	return out
}

// parseCSV reads an uploaded CSV file: records of name or name,mark. A
// first record "name,mark" is taken as a header and skipped.
func parseCSV(f io.Reader) ([]batchLine, error) {
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM from spreadsheets
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	r.LazyQuotes = true
	var out []batchLine
	for first := true; ; first = false {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("not valid CSV: %w", err)
		}
		line, _ := r.FieldPos(0)
		if first && len(rec) == 2 && strings.EqualFold(strings.TrimSpace(rec[0]), "name") && strings.EqualFold(strings.TrimSpace(rec[1]), "mark") {
			continue
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		bl := batchLine{Line: line, Name: strings.TrimSpace(rec[0])}
		switch {
		case len(rec) > 2:
			bl.Code, bl.Message = 1003, fmt.Sprintf("expected name,mark; this line has %d fields", len(rec))
		case len(rec) == 2:
			bl.Mark = strings.TrimSpace(rec[1])
		}
		out = append(out, bl)
	}
}

type devicePageData struct {
	Device     apitypes.AdminDevice
	ModelNames []string
	Disabled   bool
	Trends     deviceTrends
	Commands   deviceCommands
}

// MaxBodyBytes is the API's limit on msg_body in UTF-8 bytes, which the
// message form counts as the user types (HTML maxlength counts UTF-16
// code units, so it would let through what the API refuses).
func (devicePageData) MaxBodyBytes() int { return message.MaxBodyBytes }

func (c *Console) devicePage(q *req) error {
	name := q.r.PathValue("name")
	var d devicePageData
	if err := q.api(http.MethodGet, q.appPath("/devices/"+url.PathEscape(name)), nil, nil, &d.Device); err != nil {
		return err
	}
	var model apitypes.PropertyModel
	if err := q.api(http.MethodGet, q.appPath("/properties"), nil, nil, &model); err != nil {
		return err
	}
	for _, p := range model.Properties {
		d.ModelNames = append(d.ModelNames, p.Name)
	}
	d.Disabled = d.Device.Device.Flag == 1
	d.Trends = c.deviceTrends(q, name)
	var err error
	if d.Commands, err = c.deviceCommands(q, name); err != nil {
		return err
	}
	return q.render(http.StatusOK, "device", "Device "+name, "devices", d)
}

func (q *req) devicePath() string {
	return q.consolePath("/devices/" + url.PathEscape(q.r.PathValue("name")))
}

// desiredValue turns a typed value into JSON: a number when it reads as a
// JSON number (unless asString), a string otherwise.
func desiredValue(v string, asString bool) json.RawMessage {
	if t := strings.TrimSpace(v); !asString && numberRE.MatchString(t) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(v)
	return b
}

func (c *Console) setDesired(q *req) (string, error) {
	back := q.devicePath()
	name := strings.TrimSpace(q.r.PostFormValue("name"))
	if name == "" {
		return back, userErrorf("Enter the property's name.")
	}
	version, err := strconv.ParseInt(q.r.PostFormValue("version"), 10, 64)
	if err != nil {
		return back, userErrorf("The form lost the device's desired version; reload the page.")
	}
	body := apitypes.SetPropertyRequest{
		SeqNo:      seqNo(),
		DeviceName: q.r.PathValue("name"),
		Version:    version,
		Properties: []apitypes.PropertyValue{{
			Name:  name,
			Value: desiredValue(q.r.PostFormValue("value"), q.r.PostFormValue("as_string") != ""),
		}},
	}
	var out apitypes.PropertySetAnswer
	if err := q.appAPI(http.MethodPost, "/device/v1/property", nil, body, &out); err != nil {
		return back, err
	}
	if out.OpCode != 0 {
		msg := fmt.Sprintf("Not applied: %d %s.", out.OpCode, out.OpStatus)
		if out.OpCode == 6003 {
			msg += " Someone changed the desired properties since this page was loaded; check them and try again."
		}
		return back, userErrorf("%s", msg)
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: fmt.Sprintf("Desired %s set (version %d, op_id %d). The device gets it when connected.", name, version, out.OpID)})
	return back, nil
}

func (c *Console) setFlag(q *req) (string, error) {
	back := q.devicePath()
	flag, err := strconv.Atoi(q.r.PostFormValue("flag"))
	if err != nil || (flag != 0 && flag != 1) {
		return back, userErrorf("flag must be 0 (enable) or 1 (disable).")
	}
	if err := q.api(http.MethodPatch, q.appPath("/devices/"+url.PathEscape(q.r.PathValue("name"))), nil, apitypes.DevicePatch{Flag: &flag}, nil); err != nil {
		return back, err
	}
	msg := "Device enabled."
	if flag == 1 {
		msg = "Device disabled: it cannot connect, was disconnected if connected, and its pending messages failed."
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: msg})
	return back, nil
}

// setTags replaces the device's tags with the form's list (spaces or
// commas between tags); the API checks them.
func (c *Console) setTags(q *req) (string, error) {
	back := q.devicePath()
	tags := strings.FieldsFunc(q.r.PostFormValue("tags"), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if tags == nil {
		tags = []string{}
	}
	body := apitypes.DevicePatch{Tags: &tags}
	if err := q.api(http.MethodPatch, q.appPath("/devices/"+url.PathEscape(q.r.PathValue("name"))), nil, body, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: fmt.Sprintf("Tags saved (%d).", len(tags))})
	return back, nil
}

func (c *Console) deleteDevice(q *req) (string, error) {
	name := q.r.PathValue("name")
	if q.r.PostFormValue("confirm") == "" {
		return q.devicePath(), userErrorf("Tick the box to confirm the deletion of %s.", name)
	}
	if err := q.api(http.MethodDelete, q.appPath("/devices/"+url.PathEscape(name)), nil, nil, nil); err != nil {
		return q.devicePath(), err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Device " + name + " deleted."})
	return q.consolePath("/devices"), nil
}

func (c *Console) sendMessage(q *req) (string, error) {
	back := q.devicePath()
	body := apitypes.SendRequest{
		SeqNo:      seqNo(),
		DeviceName: q.r.PathValue("name"),
		// Browsers send a textarea's line breaks as CRLF; the device gets
		// the \n the user typed, and the byte count the form showed.
		MsgBody: strings.ReplaceAll(q.r.PostFormValue("msg_body"), "\r\n", "\n"),
	}
	if ttl := strings.TrimSpace(q.r.PostFormValue("ttl")); ttl != "" {
		n, err := strconv.ParseInt(ttl, 10, 64)
		if err != nil {
			return back, userErrorf("ttl must be a whole number of seconds, not %q.", ttl)
		}
		body.TTL = &n
	}
	var out apitypes.SendAnswer
	if err := q.appAPI(http.MethodPost, "/msg/v1/msg", nil, body, &out); err != nil {
		return back, err
	}
	id := strconv.FormatInt(out.MsgID, 10)
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Message stored; msgid " + id + ".", MsgID: id})
	return back, nil
}
