package restapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// SeqWindow is how long a seq_no stays used (spec section 4.1).
const SeqWindow = 15 * time.Minute

// fingerprint identifies a request for seq_no reuse: the endpoint and the
// body's meaning, not its formatting. Top-level fields are hashed in key
// order, nulls (which every handler treats as absent) skipped; strings are
// re-encoded so escapes do not matter, numbers spelled one way (1, 1.0
// and 1e0 are the same request), objects and arrays canonicalised.
func fingerprint(endpoint string, obj object) string {
	keys := make([]string, 0, len(obj))
	for k, v := range obj {
		if string(v) != "null" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	h := sha256.New()
	h.Write([]byte(endpoint))
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(canonicalValue(obj[k]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// replay answers a request whose seq_no is already recorded: the stored
// response for the same request, 400/1003 for a different one. It reports
// false when the seq_no is free.
func (a *API) replay(c *gin.Context, appKey string, seqNo int64, fp string) (bool, error) {
	e, err := a.store.GetSeq(c.Request.Context(), appKey, seqNo)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e.Fingerprint != fp {
		return true, errdefs.Conflict("seq_no", seqNo, "already used within 15 minutes")
	}
	// GetSeq is a durable read (store.Store): a replayed 200 promises
	// nothing a crash can take back.
	c.Header("X-Devmsg-Replayed", "true")
	c.Data(e.Status, "application/json", e.Body)
	return true, nil
}

// seqEntry builds the record of a 200 response body for fp.
func (a *API) seqEntry(fp string, body []byte) *store.SeqEntry {
	return &store.SeqEntry{
		Fingerprint: fp,
		Status:      http.StatusOK,
		Body:        body,
		ExpiresAt:   a.now().Add(SeqWindow).UnixMilli(),
	}
}

// replayUsed answers a request whose write found its seq_no already
// recorded: by an earlier request, or a concurrent one that won the race.
func (a *API) replayUsed(c *gin.Context, appKey string, seqNo int64, fp string) error {
	done, err := a.replay(c, appKey, seqNo, fp)
	if err == nil && !done {
		// The entry expired between the two reads; a retry will succeed.
		return fmt.Errorf("seq_no %d entry expired between two reads", seqNo)
	}
	return err
}

// seqFailed answers a request carrying a seq_no that failed: its service
// call, or before it, the want of a device name (errMissing). A seq_no
// recorded meanwhile (store.ErrSeqUsed) is answered from its record. A
// missing or unknown device is looked up under the seq_no first, so a
// retry still replays after the device is gone. The seq_no itself is
// checked atomically with the write, which saves a lookup per request.
func (a *API) seqFailed(c *gin.Context, appKey string, seqNo int64, fp string, err error) error {
	if errors.Is(err, store.ErrSeqUsed) {
		return a.replayUsed(c, appKey, seqNo, fp)
	}
	var (
		nf *errdefs.NotFoundError
		ae *apiError
	)
	if errors.As(err, &nf) || errors.As(err, &ae) && ae.code == CodeMissingParam {
		if done, rerr := a.replay(c, appKey, seqNo, fp); done || rerr != nil {
			return rerr
		}
	}
	return err
}

// mustJSON encodes v, a type that always encodes.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("encode " + fmt.Sprintf("%T", v) + ": " + err.Error())
	}
	return b
}

// fanSend is a validated request of the fleet sends (batch and
// broadcast): the body, its seq_no, the message and the fingerprint the
// seq_no is recorded with.
type fanSend struct {
	seqNo int64
	req   message.SendRequest
	fp    string
}

// openFanSend reads and validates the body of a fleet send on route:
// seq_no, then the route's own fields with parse, then the message. A
// seq_no already recorded is answered from its record (done), before
// any work or token is spent on it.
func (a *API) openFanSend(c *gin.Context, route string, parse func(object) error) (f fanSend, done bool, err error) {
	obj, err := readBody(c)
	if err != nil {
		return f, false, err
	}
	if f.seqNo, _, err = obj.int64Field("seq_no", true); err != nil {
		return f, false, err
	}
	if err := parse(obj); err != nil {
		return f, false, err
	}
	if f.req, err = parseSend(obj); err != nil {
		return f, false, err
	}
	f.fp = fingerprint(route, obj)
	done, err = a.replay(c, currentApp(c).Key, f.seqNo, f.fp)
	return f, done, err
}
