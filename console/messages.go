package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

type traceData struct {
	MsgID string
	Trace *messageTrace
	Error string
}

func (c *Console) tracePage(q *req) error {
	d := traceData{MsgID: strings.TrimSpace(q.r.URL.Query().Get("msgid"))}
	if d.MsgID != "" {
		var t messageTrace
		err := q.appAPI(http.MethodGet, "/msg/v1/msg", url.Values{"msgid": {d.MsgID}}, nil, &t)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
			d.Error = ae.Message // a typing mistake: shown by the form
		case err != nil:
			return err
		default:
			d.Trace = &t
		}
	}
	return q.render(http.StatusOK, "messages", "Message trace", "messages", d)
}

func (c *Console) retract(q *req) (string, error) {
	id := strings.TrimSpace(q.r.PostFormValue("msgid"))
	back := q.consolePath("/messages?msgid=" + url.QueryEscape(id))
	var t messageTrace
	if err := q.appAPI(http.MethodDelete, "/msg/v1/msg", url.Values{"msgid": {id}}, nil, &t); err != nil {
		return back, err
	}
	if n := len(t.Records); n > 0 && t.Records[n-1].Type == 8 {
		msg := "Not retracted"
		if e := t.Records[n-1].Error; e != nil {
			msg += ": " + e.Message
		}
		return back, userErrorf("%s (record 8).", msg)
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Message retracted: it will not be delivered."})
	return back, nil
}
