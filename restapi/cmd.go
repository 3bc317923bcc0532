package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// cmdGrace is the time a waiting command call's connection is given
// beyond its wait to read, render and write the answer.
const cmdGrace = 10 * time.Second

// cmdSend is a validated command send: its seq_no, the command, how long
// to wait and the fingerprint the seq_no is recorded with.
type cmdSend struct {
	seqNo int64
	req   command.Request
	wait  time.Duration
	fp    string
}

// parseCommand reads name, params, ttl, timeout and wait of a command
// send.
func parseCommand(obj object) (command.Request, time.Duration, error) {
	var req command.Request
	var err error
	if req.Name, err = commandName(obj, "name"); err != nil {
		return req, 0, err
	}
	if req.Params, err = commandParams(obj, "params"); err != nil {
		return req, 0, err
	}
	if req.TTL, err = intRange(obj, "ttl", command.DefaultTTL, 0, command.MaxTTL); err != nil {
		return req, 0, err
	}
	if req.Timeout, err = intRange(obj, "timeout", command.DefaultTimeout, command.MinTimeout, command.MaxTimeout); err != nil {
		return req, 0, err
	}
	wait, err := intRange(obj, "wait", command.DefaultWait, 0, command.MaxWait)
	if err != nil {
		return req, 0, err
	}
	return req, time.Duration(wait) * time.Second, nil
}

// commandName reads a command's name from obj's field (as it is
// spelt in messages: "name", "command.name").
func commandName(obj object, field string) (string, error) {
	name, _, err := obj.stringField(field, true)
	if err != nil {
		return "", err
	}
	if !command.ValidName(name) {
		return "", errInvalid("%s must be 1 to %d characters of letters, digits and - _ . :, got %q", field, command.MaxNameBytes, name)
	}
	return name, nil
}

// commandParams reads a command's optional params (any JSON value) from
// obj's field, compacted.
func commandParams(obj object, field string) (json.RawMessage, error) {
	if !obj.has(field) {
		return nil, nil
	}
	p := compact(obj[field])
	if !validJSONText(p) {
		return nil, errNotText(field)
	}
	if len(obj[field]) > command.MaxParamsBytes {
		return nil, errInvalid("%s must be at most %d bytes of JSON, got %d", field, command.MaxParamsBytes, len(obj[field]))
	}
	return p, nil
}

// intRange reads an optional integer field in [lo, hi] seconds.
func intRange(obj object, field string, def, lo, hi int64) (int64, error) {
	n, ok, err := obj.int64Field(field, false)
	if err != nil {
		return 0, err
	}
	if !ok {
		return def, nil
	}
	if n < lo || n > hi {
		return 0, errInvalid("%s must be %d to %d seconds, got %d", field, lo, hi, n)
	}
	return n, nil
}

// sendCommand serves POST /cmd/v1/cmd (docs/api.md, "Send a command").
func (a *API) sendCommand(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	seqNo, name, err := obj.seqTarget()
	if err != nil {
		return err
	}
	req, wait, err := parseCommand(obj)
	if err != nil {
		return err
	}
	leave, err := a.admitWait(c, wait)
	if err != nil {
		return err
	}
	defer leave()
	app := currentApp(c)
	f := cmdSend{seqNo: seqNo, req: req, wait: wait, fp: fingerprint("POST /cmd/v1/cmd", obj)}
	if name == "" {
		return a.cmdSeqFailed(c, app.Key, f, errMissing("device_name"))
	}
	// A seq_no recorded already is found by the write, which refuses it
	// (store.ErrSeqUsed), and replayed then: no read before it.
	rs, err := a.commands.Send(c.Request.Context(), app, []string{name}, req, true, seqNo, func(cs []store.Command) *store.SeqEntry {
		return a.seqEntry(f.fp, seqRecord(cs, false))
	})
	if err != nil {
		return a.cmdSeqFailed(c, app.Key, f, err)
	}
	return a.answerCommands(c, app.Key, []command.Result{rs[0]}, wait, false, fromWrite)
}

// sendCommands serves POST /cmd/v1/cmds (docs/api.md, "Send a command to
// many devices"): one token of the app's command rate per command.
func (a *API) sendCommands(c *gin.Context) error {
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	seqNo, _, err := obj.int64Field("seq_no", true)
	if err != nil {
		return err
	}
	names, err := parseDeviceNames(obj)
	if err != nil {
		return err
	}
	req, wait, err := parseCommand(obj)
	if err != nil {
		return err
	}
	leave, err := a.admitWait(c, wait)
	if err != nil {
		return err
	}
	defer leave()
	app := currentApp(c)
	f := cmdSend{seqNo: seqNo, req: req, wait: wait, fp: fingerprint("POST /cmd/v1/cmds", obj)}
	if done, err := a.cmdReplay(c, app.Key, f); done || err != nil {
		return err
	}
	if err := a.takeTokens(c, app, store.CategoryCommand, len(names)); err != nil {
		return err
	}
	rs, err := a.commands.Send(c.Request.Context(), app, names, req, false, seqNo, func(cs []store.Command) *store.SeqEntry {
		return a.seqEntry(f.fp, seqRecord(cs, true))
	})
	if err != nil {
		return a.cmdSeqFailed(c, app.Key, f, err)
	}
	return a.answerCommands(c, app.Key, rs, wait, true, fromWrite)
}

// cmdReplay answers a send whose seq_no is recorded: a different request
// is refused (400/1003); the same one creates nothing and answers its
// commands as they are now, waiting again. It reports false when the
// seq_no is free.
func (a *API) cmdReplay(c *gin.Context, appKey string, f cmdSend) (bool, error) {
	e, err := a.store.GetSeq(c.Request.Context(), appKey, f.seqNo)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.Fingerprint != f.fp {
		return true, errdefs.Conflict("seq_no", f.seqNo, "already used within 15 minutes")
	}
	var batch bool
	var elems []json.RawMessage
	var ans apitypes.CommandBatchAnswer
	if json.Unmarshal(e.Body, &ans) == nil && ans.Resp != nil {
		batch, elems = true, ans.Resp
	} else {
		elems = []json.RawMessage{e.Body}
	}
	rs := make([]command.Result, len(elems))
	for i, el := range elems {
		var v struct {
			apitypes.Command
			Code *int `json:"code"`
		}
		if err := json.Unmarshal(el, &v); err != nil {
			return true, err
		}
		if v.CmdID == 0 {
			var r apitypes.CommandRefused
			_ = json.Unmarshal(el, &r)
			rs[i] = command.Result{DeviceName: r.DeviceName, Code: r.Code, Message: r.Message}
			continue
		}
		cmd, err := a.commands.Get(c.Request.Context(), appKey, v.CmdID)
		if err != nil {
			return true, err
		}
		rs[i] = command.Result{Command: cmd, DeviceName: cmd.DeviceName}
	}
	c.Header("X-Devmsg-Replayed", "true")
	return true, a.answerCommands(c, appKey, rs, f.wait, batch, fromRead)
}

// cmdSeqFailed answers a failed send as seqFailed does, replaying a
// seq_no recorded meanwhile as cmdReplay does.
func (a *API) cmdSeqFailed(c *gin.Context, appKey string, f cmdSend, err error) error {
	var (
		nf *errdefs.NotFoundError
		ae *apiError
	)
	if errors.Is(err, store.ErrSeqUsed) || errors.As(err, &nf) || errors.As(err, &ae) && ae.code == CodeMissingParam {
		if done, rerr := a.cmdReplay(c, appKey, f); done || rerr != nil {
			return rerr
		}
	}
	return err
}

// cmdsFrom says where the commands an answer starts from came from.
type cmdsFrom int

const (
	// fromWrite: the call's own write, which returned durable.
	fromWrite cmdsFrom = iota
	// fromRead: a read, which may show a write still syncing.
	fromRead
)

// answerCommands waits up to wait for the commands of rs to end and
// writes them: one document, or the batch answer. The answer is durable
// whatever it was read from: command.Service.Wait makes what it reads
// durable, and what it hands back unread is made durable here unless the
// call wrote it itself. A waiting call thus answers the moment its
// command's end is stored, without a sync of its own.
func (a *API) answerCommands(c *gin.Context, appKey string, rs []command.Result, wait time.Duration, batch bool, from cmdsFrom) error {
	if wait > 0 {
		rc := http.NewResponseController(c.Writer)
		deadline := time.Now().Add(wait + cmdGrace)
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
	}
	cmds := make([]store.Command, len(rs))
	for i, r := range rs {
		cmds[i] = r.Command
	}
	ctx := c.Request.Context()
	cmds, err := a.commands.Wait(ctx, appKey, cmds, wait)
	if ctx.Err() != nil {
		c.Abort() // the client went away
		return nil
	}
	if err != nil {
		return err
	}
	for i := range rs {
		if cmds[i].ID != 0 {
			rs[i].Command = cmds[i]
		}
	}
	body, err := encodeCommands(rs, batch)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	if from == fromRead {
		if err := a.readsDurable(c); err != nil {
			return err
		}
	}
	c.Data(http.StatusOK, "application/json", body)
	return nil
}

// viewCommand is c as the API shows it.
func viewCommand(c store.Command) apitypes.Command {
	v := apitypes.Command{
		CmdID: c.ID, DeviceName: c.DeviceName, Name: c.Name, State: c.State, Result: c.Result, Message: c.Message,
		Progress: c.Progress, TimeCreate: c.TimeCreate, TimeSent: c.TimeSent, TimeDelivered: c.TimeDelivered, TimeDone: c.TimeDone,
	}
	if c.Answered || c.Code != 0 {
		code := c.Code
		v.Code = &code
	}
	return v
}

// getCommand serves GET /cmd/v1/cmd?cmd_id=&wait= (docs/api.md, "Query a
// command").
func (a *API) getCommand(c *gin.Context) error {
	id, err := idParam(c, "cmd_id")
	if err != nil {
		return err
	}
	wait := int64(0)
	if s, ok := c.GetQuery("wait"); ok {
		if wait, err = strconv.ParseInt(s, 10, 64); err != nil {
			return errInvalid("wait must be an integer")
		}
		if wait < 0 || wait > command.MaxWait {
			return errInvalid("wait must be 0 to %d seconds, got %d", command.MaxWait, wait)
		}
	}
	leave, err := a.admitWait(c, time.Duration(wait)*time.Second)
	if err != nil {
		return err
	}
	defer leave()
	app := currentApp(c)
	cmd, err := a.commands.Get(c.Request.Context(), app.Key, id)
	if err != nil {
		return err
	}
	return a.answerCommands(c, app.Key, []command.Result{{Command: cmd}}, time.Duration(wait)*time.Second, false, fromRead)
}

// cancelCommand serves DELETE /cmd/v1/cmd?cmd_id= (docs/api.md, "Cancel
// a command"): the command as it stands afterwards.
func (a *API) cancelCommand(c *gin.Context) error {
	id, err := idParam(c, "cmd_id")
	if err != nil {
		return err
	}
	cmd, err := a.commands.Cancel(c.Request.Context(), currentApp(c).Key, id)
	if err != nil {
		return err
	}
	return a.writeRead(c, viewCommand(cmd))
}

// admitWait admits a command call that waits as a long-poll, before it
// creates or reads anything: it holds a connection as long as a pull
// with wait does, and counts against the same per-app cap and descriptor
// budget (429/2002 when refused). A call without wait needs no
// admission.
func (a *API) admitWait(c *gin.Context, wait time.Duration) (leave func(), err error) {
	if wait <= 0 {
		return func() {}, nil
	}
	return a.enterWait(c)
}
