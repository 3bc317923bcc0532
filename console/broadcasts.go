package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/devmsg/devmsg/apitypes"
)

// broadcastView is GET /msg/v1/broadcast's answer, with what the page
// computes from it.
type broadcastView struct {
	apitypes.Broadcast
}

// Live reports whether the page should keep refreshing its progress: the
// fan-out runs, or messages still wait for their devices.
func (b broadcastView) Live() bool {
	return b.State == "fanning_out" || b.Delivered+b.Expired+b.Failed+b.Retracted < b.Queued
}

// Max is the bars' scale: the targets, or the queued messages if more.
func (b broadcastView) Max() int64 { return max(b.Targets, b.Queued, 1) }

type broadcastData struct {
	ID        string
	Broadcast *broadcastView
	Chart     Chart
	Error     string
}

// broadcastPage shows the broadcast form, and with ?id= the progress of
// that broadcast (refreshed live by console.js while it runs).
func (c *Console) broadcastPage(q *req) error {
	d := broadcastData{ID: strings.TrimSpace(q.r.URL.Query().Get("id"))}
	if d.ID != "" {
		var b broadcastView
		err := q.appAPI(http.MethodGet, "/msg/v1/broadcast", url.Values{"broadcast_id": {d.ID}}, nil, &b.Broadcast)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
			d.Error = ae.Message
		case err != nil:
			return err
		default:
			d.Broadcast = &b
			run := c.progress.record(q.key+"/"+d.ID, progressSample{At: time.Now(), Queued: b.Queued, Delivered: b.Delivered, Failed: b.Failed})
			d.Chart = progressChart(time.Unix(b.TimeCreate, 0), run)
		}
	}
	return q.render(http.StatusOK, "broadcast", "Broadcast", "broadcast", d)
}

// createBroadcast sends the form's broadcast and shows its progress.
func (c *Console) createBroadcast(q *req) (string, error) {
	back := q.consolePath("/broadcast")
	target := apitypes.BroadcastTarget{All: true}
	if q.r.PostFormValue("target") != "all" {
		tag := strings.TrimSpace(q.r.PostFormValue("tag"))
		if tag == "" {
			return back, userErrorf("Name a tag, or choose every device.")
		}
		target = apitypes.BroadcastTarget{Tag: tag}
	}
	body := apitypes.BroadcastRequest{
		SeqNo:   seqNo(),
		Target:  target,
		MsgBody: strings.ReplaceAll(q.r.PostFormValue("msg_body"), "\r\n", "\n"),
	}
	if ttl := strings.TrimSpace(q.r.PostFormValue("ttl")); ttl != "" {
		n, err := strconv.ParseInt(ttl, 10, 64)
		if err != nil {
			return back, userErrorf("ttl must be a whole number of seconds, not %q.", ttl)
		}
		body.TTL = &n
	}
	var out apitypes.BroadcastCreated
	if err := q.appAPI(http.MethodPost, "/msg/v1/broadcast", nil, body, &out); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: fmt.Sprintf("Broadcast %d accepted for %d devices.", out.BroadcastID, out.Targets)})
	return back + "?id=" + strconv.FormatInt(out.BroadcastID, 10), nil
}

// cancelBroadcast cancels the form's broadcast.
func (c *Console) cancelBroadcast(q *req) (string, error) {
	id := strings.TrimSpace(q.r.PostFormValue("id"))
	back := q.consolePath("/broadcast?id=" + url.QueryEscape(id))
	if err := q.appAPI(http.MethodDelete, "/msg/v1/broadcast", url.Values{"broadcast_id": {id}}, nil, nil); err != nil {
		return back, err
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: "Broadcast cancelled: devices not yet reached get nothing, and undelivered messages are being retracted."})
	return back, nil
}
