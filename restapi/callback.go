package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/webhook"
)

// Dead-letter listing limits.
const (
	DefaultDeadLetterListLimit = 100
	MaxDeadLetterListLimit     = 1000
)

// The callback record types run from 0 to 8 (spec section 6.3).
const (
	minRecordType = store.RecordTargetValid
	maxRecordType = store.RecordRetractionFailed
)

// newVerifyClient returns the client of echostr verifications: bounded by
// timeout (0: webhook.DefaultVerifyTimeout), following no redirect,
// keeping no idle connection to URLs it may never see again, and
// connecting only where the address guard allows.
func newVerifyClient(timeout time.Duration, allowed []netip.Prefix) *http.Client {
	if timeout <= 0 {
		timeout = webhook.DefaultVerifyTimeout
	}
	transport := netguard.New(allowed).Transport()
	transport.DisableKeepAlives = true
	return &http.Client{
		Timeout:       timeout,
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func viewCallback(app store.App) apitypes.CallbackSettings {
	types := app.Callback.Types
	if types == nil { // nil means every type
		for t := minRecordType; t <= maxRecordType; t++ {
			types = append(types, t)
		}
	}
	return apitypes.CallbackSettings{Enabled: app.Callback.Enabled, Types: types, SigningSecret: webhook.SigningSecret(app)}
}

// getCallback serves GET /admin/v1/apps/{key}/callback: the switch, the
// record types sent, and the signing secret receivers verify with.
func (a *API) getCallback(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	return writeJSON(c, viewCallback(app))
}

// putCallback sets the switch, the record types, or both; a field left
// out is unchanged.
func (a *API) putCallback(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	enabled, setEnabled, err := obj.boolField("enabled", false)
	if err != nil {
		return err
	}
	var types []int
	setTypes := obj.has("types")
	if setTypes {
		if types, err = parseRecordTypes(obj["types"]); err != nil {
			return err
		}
	}
	var ch apps.CallbackChange
	if setEnabled {
		ch.Enabled = &enabled
	}
	if setTypes {
		ch.Types = types
	}
	app, err = a.appSvc.SetCallback(c.Request.Context(), app.Key, ch)
	if err != nil {
		return err
	}
	return writeJSON(c, viewCallback(app))
}

// parseRecordTypes reads the types field: distinct integers 0 to 8, in
// any order. The result is sorted and never nil ([] sends no record).
func parseRecordTypes(raw json.RawMessage) ([]int, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, errInvalid("types must be an array of record types %d to %d", minRecordType, maxRecordType)
	}
	types := make([]int, 0, len(elems))
	for i, el := range elems {
		n, err := parseInt(el)
		if err != nil {
			return nil, errInvalid("types[%d] must be an integer record type %d to %d, got %s", i, minRecordType, maxRecordType, el)
		}
		if n < minRecordType || n > maxRecordType {
			return nil, errInvalid("types[%d]: %d is not a record type (%d to %d)", i, n, minRecordType, maxRecordType)
		}
		if slices.Contains(types, int(n)) {
			return nil, errInvalid("types[%d]: record type %d appears twice", i, n)
		}
		types = append(types, int(n))
	}
	slices.Sort(types)
	return types, nil
}

func urlsView(app store.App) apitypes.CallbackURLs {
	urls := make([]apitypes.CallbackURL, len(app.Callback.URLs))
	for i, u := range app.Callback.URLs {
		urls[i] = apitypes.CallbackURL(u)
	}
	return apitypes.CallbackURLs{URLs: urls}
}

// listCallbackURLs serves GET /admin/v1/apps/{key}/callback/urls.
func (a *API) listCallbackURLs(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	return writeJSON(c, urlsView(app))
}

// urlField reads the url field of a body; "" counts as missing.
func urlField(obj object) (string, error) {
	u, _, err := obj.stringField("url", true)
	if err == nil && u == "" {
		err = errMissing("url")
	}
	return u, err
}

// checkURL applies the URL rules of spec section 6.1.
func (a *API) checkURL(u string) error {
	if err := webhook.CheckURL(u, a.cfg.CallbackAllowCustomPorts); err != nil {
		return errInvalid("%v", err)
	}
	return nil
}

// verifyURL performs the echostr verification, with the app's headers.
func (a *API) verifyURL(c *gin.Context, app store.App, u string) error {
	err := webhook.Verify(c.Request.Context(), a.verifier, u, app)
	if errors.Is(err, netguard.ErrNotAllowed) {
		return errGuarded("callback URL", u)
	}
	if err != nil {
		return errInvalid("callback URL %q: %v", u, err)
	}
	return nil
}

// errGuarded answers a URL the address guard refused: it says which kind
// of address is refused and which setting exempts a network, but names
// neither the address the URL reached nor any dial detail.
func errGuarded(what, u string) error {
	return errInvalid("URL not allowed: %s %q points to a loopback, private, link-local or other internal address;"+
		" the service operator can allow its network with the callback.allowed_networks setting", what, u)
}

// addCallbackURL serves POST /admin/v1/apps/{key}/callback/urls: checks
// and verifies the URL, then adds it; the first URL becomes the default.
func (a *API) addCallbackURL(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	u, err := urlField(obj)
	if err != nil {
		return err
	}
	if err := a.checkURL(u); err != nil {
		return err
	}
	// Checked before the verification, which can take seconds, and again
	// in the update, which a concurrent change may have made stale.
	if err := apps.CheckAddable(app.Callback, u); err != nil {
		return err
	}
	if err := a.verifyURL(c, app, u); err != nil {
		return err
	}
	if app, err = a.appSvc.AddCallbackURL(c.Request.Context(), app.Key, u); err != nil {
		return err
	}
	return writeJSON(c, urlsView(app))
}

// setDefaultCallbackURL serves POST .../callback/urls/default: the URL,
// which must be configured, becomes the only default.
func (a *API) setDefaultCallbackURL(c *gin.Context) error {
	app, obj, err := a.appAndBody(c)
	if err != nil {
		return err
	}
	u, err := urlField(obj)
	if err != nil {
		return err
	}
	if app, err = a.appSvc.SetDefaultCallbackURL(c.Request.Context(), app.Key, u); err != nil {
		return err
	}
	return writeJSON(c, urlsView(app))
}

// testCallbackURL serves POST .../callback/urls/test: the rules and the
// echostr verification, for a URL configured or not; nothing is stored.
func (a *API) testCallbackURL(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	obj, err := readBody(c)
	if err != nil {
		return err
	}
	u, err := urlField(obj)
	if err != nil {
		return err
	}
	if err := a.checkURL(u); err != nil {
		return err
	}
	if err := a.verifyURL(c, app, u); err != nil {
		return err
	}
	return writeJSON(c, apitypes.URLTest{OK: true, URL: u})
}

// deleteCallbackURL serves DELETE .../callback/urls?url=...: any URL but
// the default.
func (a *API) deleteCallbackURL(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	u := c.Query("url")
	if u == "" {
		return errMissing("url")
	}
	if app, err = a.appSvc.DeleteCallbackURL(c.Request.Context(), app.Key, u); err != nil {
		return err
	}
	return writeJSON(c, urlsView(app))
}

// listDeliveries serves GET .../callback/deliveries: the app's latest
// POST attempts, newest first, as the callback worker of this node
// remembers them (in memory, so a restart or another node starts empty).
func (a *API) listDeliveries(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	var recent []callback.Delivery
	if a.cfg.Callbacks != nil {
		recent = a.cfg.Callbacks.Recent(app.Key)
	}
	out := make([]apitypes.Delivery, len(recent))
	for i, d := range recent {
		out[i] = apitypes.Delivery{
			Time: d.Time.UTC().Format(rfc3339Milli), URL: d.URL, Records: d.Records, Attempt: d.Attempt,
			Status: d.Status, LatencyMS: d.LatencyMS, Error: d.Error,
		}
	}
	return writeJSON(c, apitypes.Deliveries{Deliveries: out})
}

// rfc3339Milli is RFC 3339 with exactly three fractional digits, so the
// times of one second's attempts sort as strings.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// listDeadLetters serves GET .../callback/deadletters?cursor=&limit=:
// batches whose delivery failed every retry, oldest first, each with its
// records as they were sent.
func (a *API) listDeadLetters(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c, DefaultDeadLetterListLimit, MaxDeadLetterListLimit)
	if err != nil {
		return err
	}
	// Dead-letter ids are decimal numbers (the Seq of the batch's first
	// record), so a cursor is one too; anything else is the caller's
	// mistake, not the store's.
	cursor := c.Query("cursor")
	if n, err := strconv.ParseInt(cursor, 10, 64); cursor != "" && (err != nil || n < 0) {
		return errInvalid("cursor must be the next value of a previous page, got %q", cursor)
	}
	// One more than asked tells whether another page follows.
	dls, err := a.store.ListDeadLetters(c.Request.Context(), app.Key, cursor, limit+1)
	if err != nil {
		return fmt.Errorf("list dead letters: %w", err)
	}
	next := ""
	if len(dls) > limit {
		dls = dls[:limit]
		next = dls[limit-1].ID
	}
	out := make([]apitypes.DeadLetter, len(dls))
	for i, d := range dls {
		// Each record as the callback delivered it (callback.Record).
		recs := make([]apitypes.Record, len(d.Entries))
		for j, e := range d.Entries {
			recs[j] = record(e.ID, e.Record)
		}
		out[i] = apitypes.DeadLetter{ID: d.ID, URL: d.URL, Attempts: d.Attempts, LastError: d.LastError, Time: d.Time, Records: recs}
	}
	return writeJSON(c, apitypes.DeadLetters{DeadLetters: out, Next: next})
}

// redeliverDeadLetter serves POST .../callback/deadletters/{id}/redeliver:
// the batch goes back to the end of its URL's delivery queue.
func (a *API) redeliverDeadLetter(c *gin.Context) error {
	app, err := a.appParam(c)
	if err != nil {
		return err
	}
	d, err := a.deadLetters.Redeliver(c.Request.Context(), app.Key, c.Param("id"))
	if err != nil {
		return err
	}
	return writeJSON(c, apitypes.Redelivered{ID: d.ID, Records: len(d.Entries)})
}
