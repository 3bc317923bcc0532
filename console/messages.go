package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
)

type messagesData struct {
	MsgID string
	Trace *apitypes.Message
	Error string
	// Recent lists the app's messages, newest first, when no msgid is
	// traced; Cursor is this page's, Next the following one's.
	Recent       []apitypes.Message
	Cursor, Next string
}

// messagesPage traces the message of ?msgid=, or lists the app's recent
// messages (?cursor= pages back in time).
func (c *Console) messagesPage(q *req) error {
	query := q.r.URL.Query()
	d := messagesData{MsgID: strings.TrimSpace(query.Get("msgid")), Cursor: query.Get("cursor")}
	if d.MsgID != "" {
		var t apitypes.Message
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
		return q.render(http.StatusOK, "messages", "Message trace", "messages", d)
	}
	list := url.Values{"limit": {strconv.Itoa(messagesPerPage)}}
	if d.Cursor != "" {
		list.Set("cursor", d.Cursor)
	}
	var page apitypes.MessagePage
	if err := q.api(http.MethodGet, q.appPath("/messages"), list, nil, &page); err != nil {
		return err
	}
	d.Recent, d.Next = page.Messages, page.NextCursor
	return q.render(http.StatusOK, "messages", "Messages", "messages", d)
}

func (c *Console) retract(q *req) (string, error) {
	id := strings.TrimSpace(q.r.PostFormValue("msgid"))
	back := q.consolePath("/messages?msgid=" + url.QueryEscape(id))
	var t apitypes.Message
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
