package restapi

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// createBroadcast serves POST /msg/v1/broadcast (docs/api.md,
// "Broadcast").
func (a *API) createBroadcast(c *gin.Context) error {
	var t message.Target
	f, done, err := a.openFanSend(c, "POST /msg/v1/broadcast", func(obj object) (err error) {
		t, err = parseTarget(obj)
		return err
	})
	if done || err != nil {
		return err
	}
	app := currentApp(c)
	seqNo, req, fp := f.seqNo, f.req, f.fp
	b, err := a.broadcasts.Create(c.Request.Context(), app, t, req, seqNo, func(id, targets int64) *store.SeqEntry {
		return a.seqEntry(fp, broadcastAnswer(id, targets))
	})
	if err != nil {
		return a.seqFailed(c, app.Key, seqNo, fp, err)
	}
	c.Data(http.StatusOK, "application/json", broadcastAnswer(b.ID, b.Targets))
	return nil
}

// broadcastAnswer is the body of an accepted broadcast's 200,
// apitypes.BroadcastCreated written without encoding/json
// (fastpath_test.go holds the two to the same bytes).
func broadcastAnswer(id, targets int64) []byte {
	return []byte(`{"broadcast_id":` + strconv.FormatInt(id, 10) + `,"targets":` + strconv.FormatInt(targets, 10) + `}`)
}

// parseTarget reads target: {"tag":"T"} or {"all":true}, exactly one.
func parseTarget(obj object) (message.Target, error) {
	if !obj.has("target") {
		return message.Target{}, errMissing("target")
	}
	t, err := parseObject(obj["target"], "target")
	if err != nil {
		return message.Target{}, err
	}
	tag, hasTag, err := t.stringField("tag", false)
	if err != nil {
		return message.Target{}, errInvalid("target.tag must be a string")
	}
	all, hasAll, err := t.boolField("all", false)
	if err != nil {
		return message.Target{}, errInvalid("target.all must be true")
	}
	switch {
	case hasTag && hasAll:
		return message.Target{}, errInvalid("target must hold either tag or all, not both")
	case hasTag:
		if err := devices.ValidateTag("target.tag", tag); err != nil {
			return message.Target{}, err
		}
		return message.Target{Tag: tag}, nil
	case hasAll && all:
		return message.Target{All: true}, nil
	case hasAll:
		return message.Target{}, errInvalid("target.all must be true")
	}
	return message.Target{}, errInvalid("target must hold tag (a string) or all (true)")
}

func viewBroadcast(b store.Broadcast, st message.BroadcastStats) apitypes.Broadcast {
	return apitypes.Broadcast{
		BroadcastID: b.ID, State: b.State, Targets: b.Targets, Queued: b.Queued,
		Delivered: st.Delivered, Expired: st.Expired, Failed: st.Failed, Retracted: st.Retracted, TimeCreate: b.TimeCreate,
	}
}

// getBroadcast serves GET /msg/v1/broadcast?broadcast_id=N.
func (a *API) getBroadcast(c *gin.Context) error {
	id, err := idParam(c, "broadcast_id")
	if err != nil {
		return err
	}
	b, st, err := a.broadcasts.Get(c.Request.Context(), currentApp(c).Key, id)
	if err != nil {
		return err
	}
	return a.writeRead(c, viewBroadcast(b, st))
}

// cancelBroadcast serves DELETE /msg/v1/broadcast?broadcast_id=N.
func (a *API) cancelBroadcast(c *gin.Context) error {
	id, err := idParam(c, "broadcast_id")
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	app := currentApp(c).Key
	if _, err := a.broadcasts.Cancel(ctx, app, id); err != nil {
		return err
	}
	b, st, err := a.broadcasts.Get(ctx, app, id)
	if err != nil {
		return err
	}
	return writeJSON(c, viewBroadcast(b, st))
}
