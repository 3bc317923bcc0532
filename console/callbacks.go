package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
)

// recordTypes names the status record types 0 to 8.
var recordTypes = []string{
	"target valid", "target invalid", "submission success", "submission failure",
	"delivery success", "delivery failure", "click", "retraction success", "retraction failure",
}

func recordName(t int) string {
	if t >= 0 && t < len(recordTypes) {
		return recordTypes[t]
	}
	return "type " + strconv.Itoa(t)
}

type typeBox struct {
	Type    int
	Name    string
	Checked bool
}

type callbacksData struct {
	Settings    apitypes.CallbackSettings
	Types       []typeBox
	URLs        apitypes.CallbackURLs
	Deliveries  apitypes.Deliveries
	DeadLetters apitypes.DeadLetters
	Cursor      string
}

func (c *Console) callbacksPage(q *req) error {
	var d callbacksData
	if err := q.api(http.MethodGet, q.appPath("/callback"), nil, nil, &d.Settings); err != nil {
		return err
	}
	for t, name := range recordTypes {
		d.Types = append(d.Types, typeBox{t, name, slices.Contains(d.Settings.Types, t)})
	}
	if err := q.api(http.MethodGet, q.appPath("/callback/urls"), nil, nil, &d.URLs); err != nil {
		return err
	}
	if err := q.api(http.MethodGet, q.appPath("/callback/deliveries"), nil, nil, &d.Deliveries); err != nil {
		return err
	}
	d.Cursor = q.r.URL.Query().Get("cursor")
	query := url.Values{"limit": {strconv.Itoa(deadLettersPerPage)}}
	if d.Cursor != "" {
		query.Set("cursor", d.Cursor)
	}
	if err := q.api(http.MethodGet, q.appPath("/callback/deadletters"), query, nil, &d.DeadLetters); err != nil {
		return err
	}
	return q.render(http.StatusOK, "callbacks", "Callbacks", "callbacks", d)
}

func (q *req) callbacksPath() string { return q.consolePath("/callbacks") }

func (c *Console) setSwitch(q *req) (string, error) {
	back := q.callbacksPath()
	on := q.r.PostFormValue("enabled") == "1"
	if err := q.api(http.MethodPut, q.appPath("/callback"), nil, apitypes.CallbackChange{Enabled: &on}, nil); err != nil {
		return back, err
	}
	msg := "Callbacks are off: new status records are dropped, not kept."
	if on {
		msg = "Callbacks are on."
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: msg})
	return back, nil
}

func (c *Console) setTypes(q *req) (string, error) {
	back := q.callbacksPath()
	types := []int{}
	for _, v := range q.r.PostForm["types"] {
		n, err := strconv.Atoi(v)
		if err != nil {
			return back, userErrorf("Unknown record type %q.", v)
		}
		if !slices.Contains(types, n) {
			types = append(types, n)
		}
	}
	if err := q.api(http.MethodPut, q.appPath("/callback"), nil, apitypes.CallbackChange{Types: &types}, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Record types saved."})
	return back, nil
}

func formURL(q *req) string { return strings.TrimSpace(q.r.PostFormValue("url")) }

func (c *Console) addURL(q *req) (string, error) {
	back := q.callbacksPath()
	u := formURL(q)
	// The API checks the rules, then verifies the URL live; its message
	// says which rule failed or what the URL answered.
	if err := q.api(http.MethodPost, q.appPath("/callback/urls"), nil, apitypes.URLRequest{URL: u}, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Verified and added: " + u + " answered the echostr check."})
	return back, nil
}

func (c *Console) testURL(q *req) (string, error) {
	back := q.callbacksPath()
	u := formURL(q)
	if err := q.api(http.MethodPost, q.appPath("/callback/urls/test"), nil, apitypes.URLRequest{URL: u}, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Test passed: " + u + " answered the echostr check."})
	return back, nil
}

func (c *Console) defaultURL(q *req) (string, error) {
	back := q.callbacksPath()
	u := formURL(q)
	if err := q.api(http.MethodPost, q.appPath("/callback/urls/default"), nil, apitypes.URLRequest{URL: u}, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: u + " is now the default URL."})
	return back, nil
}

func (c *Console) deleteURL(q *req) (string, error) {
	back := q.callbacksPath()
	u := formURL(q)
	if err := q.api(http.MethodDelete, q.appPath("/callback/urls"), url.Values{"url": {u}}, nil, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Deleted " + u + ". Records already queued for it are still delivered."})
	return back, nil
}

func (c *Console) redeliver(q *req) (string, error) {
	back := q.callbacksPath() + "#deadletters"
	id := q.r.PathValue("id")
	var out apitypes.Redelivered
	if err := q.api(http.MethodPost, q.appPath("/callback/deadletters/"+url.PathEscape(id)+"/redeliver"), nil, nil, &out); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Dead letter " + id + " queued again (" + strconv.Itoa(out.Records) + " records)."})
	return back, nil
}
