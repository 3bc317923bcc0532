package restapi

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// MaxCallbackURLBytes bounds the temporary callback URL of a send.
const MaxCallbackURLBytes = 2048

// sendMessage serves POST /msg/v1/msg (spec 4.2; docs/api.md, "Send a
// message").
func (a *API) sendMessage(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	seqNo, name, err := obj.seqTarget()
	if err != nil {
		return err
	}
	req, err := parseSend(obj)
	if err != nil {
		return err
	}
	app := currentApp(c)
	fp := fingerprint("POST /msg/v1/msg", obj)
	if name == "" {
		return a.seqFailed(c, app.Key, seqNo, fp, errMissing("device_name"))
	}
	m, err := a.messages.SendTo(c.Request.Context(), app, name, req, seqNo, func(msgid int64) *store.SeqEntry {
		return a.seqEntry(fp, sendAnswer(msgid))
	})
	if err != nil {
		return a.seqFailed(c, app.Key, seqNo, fp, err)
	}
	c.Data(200, "application/json", sendAnswer(m.ID))
	return nil
}

// sendAnswer is the body of a send's 200, apitypes.SendAnswer written
// without encoding/json (fastpath_test.go holds the two to the same
// bytes).
func sendAnswer(msgid int64) []byte {
	return []byte(`{"msgid":` + strconv.FormatInt(msgid, 10) + `}`)
}

// parseSend reads msg_body, ttl and callback of a send.
func parseSend(obj object) (message.SendRequest, error) {
	var req message.SendRequest
	body, _, err := obj.stringField("msg_body", true)
	if err != nil {
		return req, err
	}
	if len(body) == 0 || len(body) > message.MaxBodyBytes {
		return req, errInvalid("msg_body must be 1 to %d bytes, got %d", message.MaxBodyBytes, len(body))
	}
	req.Body = body
	ttl, ok, err := obj.int64Field("ttl", false)
	if err != nil {
		return req, err
	}
	if !ok {
		ttl = message.DefaultTTL
	}
	if ttl < 0 || ttl > message.MaxTTL {
		return req, errInvalid("ttl must be 0 to %d seconds, got %d", message.MaxTTL, ttl)
	}
	req.TTL = ttl
	if obj.has("callback") {
		cb, err := parseObject(obj["callback"], "callback")
		if err != nil {
			return req, err
		}
		u, _, err := cb.stringField("url", false)
		if err != nil {
			return req, errInvalid("callback.url must be a string")
		}
		if u != "" {
			if err := checkURLSyntax(u); err != nil {
				return req, errInvalid("callback.url: %v", err)
			}
		}
		req.CallbackURL = u
		if cb.has("params") {
			p := compact(cb["params"])
			if len(p) == 0 || p[0] != '{' {
				return req, errInvalid("callback.params must be a JSON object")
			}
			if !validJSONText(p) {
				return req, errNotText("callback.params")
			}
			if len(p) > message.MaxParamsBytes {
				return req, errInvalid("callback.params must be at most %d bytes of JSON, got %d", message.MaxParamsBytes, len(p))
			}
			req.Params = p
		}
	}
	return req, nil
}

// checkURLSyntax accepts an absolute http or https URL with a host.
func checkURLSyntax(s string) error {
	if len(s) > MaxCallbackURLBytes {
		return fmt.Errorf("longer than %d bytes", MaxCallbackURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must begin with http:// or https://")
	}
	if u.Host == "" {
		return fmt.Errorf("has no host")
	}
	return nil
}

// getMessage serves GET /msg/v1/msg?msgid= (docs/api.md, "Query a
// message").
func (a *API) getMessage(c *gin.Context) error {
	id, err := idParam(c, "msgid")
	if err != nil {
		return err
	}
	m, err := a.messages.Get(c.Request.Context(), currentApp(c).Key, id)
	if err != nil {
		return err
	}
	return a.writeRead(c, viewMessage(m))
}

// retractMessage serves DELETE /msg/v1/msg?msgid= (docs/api.md, "Retract
// a message"):
// the message as it stands afterwards, its last record saying whether
// the retraction succeeded (7) or not (8).
func (a *API) retractMessage(c *gin.Context) error {
	id, err := idParam(c, "msgid")
	if err != nil {
		return err
	}
	m, err := a.messages.Retract(c.Request.Context(), currentApp(c).Key, id)
	if err != nil {
		return err
	}
	return writeJSON(c, viewMessage(m))
}

// idParam reads the id in the query parameter name (msgid, cmd_id,
// broadcast_id, job_id): missing is 1002, not a positive integer 1003.
// Every id devmsg gives is positive, so 0 or -5 is a malformed id, not
// an unknown one.
func idParam(c *gin.Context, name string) (int64, error) {
	s, ok := c.GetQuery(name)
	if !ok || s == "" {
		return 0, errMissing(name)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, errInvalid("%s must be a positive integer", name)
	}
	return id, nil
}

func viewMessage(m store.Message) apitypes.Message {
	return apitypes.Message{
		MsgID: m.ID, DeviceName: m.DeviceName, State: m.State, TTL: m.TTL, TimeCreate: m.TimeCreate,
		Records: records(m),
	}
}

// records is m's status records as the API shows them, each with the id
// its callback carries (store.RecordID).
func records(m store.Message) []apitypes.Record {
	rs := message.Records(m)
	out := make([]apitypes.Record, len(rs))
	for i, r := range rs {
		out[i] = record(store.RecordID(m.ID, i), r)
	}
	return out
}

// record is r, whose stable id is id, as the API shows it.
func record(id string, r store.Record) apitypes.Record {
	out := apitypes.Record{
		ID: id, Type: r.Type, ChannelKey: r.ChannelKey, MsgID: r.MsgID, UserID: r.UserID, SenderID: r.SenderID,
		Sender: r.Sender, SentTime: r.SentTime, Params: r.Params,
	}
	if r.Error != nil {
		e := apitypes.RecordError(*r.Error)
		out.Error = &e
	}
	return out
}
