package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/devmsg/devmsg/apitypes"
)

const (
	// sessionCookie holds the session id.
	sessionCookie = "devmsg_console"
	// loginCookie holds the CSRF token of the sign-in forms, which are
	// used before there is a session (double-submit: the form must carry
	// the cookie's value, which another site cannot read).
	loginCookie = "devmsg_console_login"
)

// session is a signed-in user. The credentials stay in memory only and
// are never logged.
type session struct {
	id      string
	admin   bool
	who     string // shown in the header
	cr      creds  // Basic credentials for the API
	appKey  string // the app of an app owner; "" for the admin
	csrf    string
	created time.Time
	seen    time.Time
	flash   *flash
	// commands holds the ids of the commands the session sent, by
	// app/device, newest first (see rememberCommand).
	commands map[string][]int64
	// jobs holds the ids of the jobs the session created or opened, by
	// app, newest first (see rememberJob).
	jobs map[string][]int64
}

// flash is the outcome of a POST, shown once by the page it redirects to.
type flash struct {
	Kind    string // "ok" or "error"
	Message string
	// Secret is a master secret revealed or newly made, shown once.
	Secret string
	// NewApp is a just-created app with its master secret, shown once.
	NewApp *newApp
	// Batch holds the per-line results of a batch create, with the new
	// devices' secrets, shown once.
	Batch *batchResult
	// MsgID is a message just sent, linked to its trace.
	MsgID string
	// Form names the form an error belongs to: the page shows the error
	// next to that form, not at the top, and Values refill it.
	Form   string
	Values url.Values
}

type newApp struct{ Name, Key, MasterSecret string }

// randToken returns 32 random bytes, base64url without padding.
func randToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tokenEqual compares a presented token with the expected one in
// constant time; an empty expected token matches nothing.
func tokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// session returns a copy of r's live session, refreshing its idle timer;
// hadCookie tells an expired session from none.
func (c *Console) session(r *http.Request) (s *session, hadCookie bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	live, ok := c.sessions[ck.Value]
	if !ok {
		return nil, true
	}
	if now.Sub(live.seen) > SessionIdle {
		delete(c.sessions, ck.Value)
		return nil, true
	}
	live.seen = now
	cp := *live
	cp.flash = nil
	return &cp, true
}

func (c *Console) newSession(w http.ResponseWriter, r *http.Request, s *session) {
	s.id, s.csrf = randToken(), randToken()
	s.created, s.seen = c.now(), c.now()
	c.mu.Lock()
	c.sessions[s.id] = s
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.id, Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func (c *Console) endSession(w http.ResponseWriter, r *http.Request, s *session) {
	c.mu.Lock()
	delete(c.sessions, s.id)
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func (c *Console) setFlash(id string, f *flash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[id]; ok {
		s.flash = f
	}
}

func (c *Console) takeFlash(id string) *flash {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if !ok {
		return nil
	}
	f := s.flash
	s.flash = nil
	return f
}

// takeFormFlash takes the session's flash if it belongs to form: the
// page shows it beside that form rather than at the top.
func (c *Console) takeFormFlash(id, form string) *flash {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if !ok || s.flash == nil || s.flash.Form != form {
		return nil
	}
	f := s.flash
	s.flash = nil
	return f
}

// setCreds replaces a session's credentials after its own master secret
// was rotated.
func (c *Console) setCreds(id string, cr creds) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[id]; ok {
		s.cr = cr
	}
}

// failures counts failed sign-ins of one (client IP, user).
type failures struct {
	times    []time.Time // within the last LockoutWindow
	until    time.Time   // locked out before this time
	inflight bool        // a sign-in for this key is being checked
}

// maxUserLen bounds a typed user name or app key; longer ones are refused
// before they cost memory in the lockout table.
const maxUserLen = 256

// lockKey is the lockout table's key: the client address and a hash of
// the user, so an entry has a fixed size.
func lockKey(r *http.Request, user string) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	sum := sha256.Sum256([]byte(user))
	return host + "\x00" + string(sum[:])
}

// beginAttempt starts checking a sign-in for key. It returns how long key
// stays locked out (0 when it is not), and busy when another sign-in for
// key is still being checked: one at a time, so parallel guesses cannot
// all be checked before the failures that lock the key are counted. When
// both are zero the caller must call endAttempt.
func (c *Console) beginAttempt(key string) (left time.Duration, busy bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failuresOf(key)
	if now.Before(f.until) {
		return f.until.Sub(now), false
	}
	if f.inflight {
		return 0, true
	}
	f.inflight = true
	return 0, false
}

// failuresOf returns key's record, made if there is none; c.mu is held.
func (c *Console) failuresOf(key string) *failures {
	f, ok := c.fails[key]
	if !ok {
		f = &failures{}
		c.fails[key] = f
	}
	return f
}

// endAttempt ends the check beginAttempt started.
func (c *Console) endAttempt(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.fails[key]; ok {
		f.inflight = false
	}
}

// failed records a failed sign-in and returns how long key is now locked
// out, 0 when it is not.
func (c *Console) failed(key string) time.Duration {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failuresOf(key)
	f.times = append(recent(f.times, now), now)
	if len(f.times) >= LockoutFailures {
		f.times = nil
		f.until = now.Add(LockoutWindow)
		return LockoutWindow
	}
	return 0
}

// recent keeps the times within LockoutWindow of now.
func recent(ts []time.Time, now time.Time) []time.Time {
	keep := ts[:0]
	for _, t := range ts {
		if now.Sub(t) < LockoutWindow {
			keep = append(keep, t)
		}
	}
	return keep
}

// prune forgets idle sessions and stale failure records.
func (c *Console) prune() {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range c.sessions {
		if now.Sub(s.seen) > SessionIdle {
			delete(c.sessions, id)
		}
	}
	for k, f := range c.fails {
		f.times = recent(f.times, now)
		if len(f.times) == 0 && !now.Before(f.until) {
			delete(c.fails, k)
		}
	}
}

// loginData is the sign-in page's data.
type loginData struct {
	Mode    string // the form the message is about: "admin" or "app"
	User    string // typed user name or app key, kept on failure
	Error   string
	Notice  string
	Token   string
	Expired bool
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if s, _ := c.session(r); s != nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	d := loginData{Mode: "admin"}
	switch {
	case r.URL.Query().Get("expired") != "":
		d.Notice = "Your session ended. Sign in again."
	case r.URL.Query().Get("signed_out") != "":
		d.Notice = "You are signed out."
	}
	c.renderLogin(w, r, http.StatusOK, d)
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, d loginData) {
	token := ""
	if ck, err := r.Cookie(loginCookie); err == nil && len(ck.Value) == 43 {
		token = ck.Value
	} else {
		token = randToken()
		http.SetCookie(w, &http.Cookie{
			Name: loginCookie, Value: token, Path: Prefix,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
		})
	}
	d.Token = token
	if err := c.write(w, status, "login", view{Title: "Sign in", Data: d}); err != nil {
		c.log.Error("render login", "err", err)
	}
}

// login serves POST /console/login: mode "admin" with username and
// password, or mode "app" with app_key and master_secret.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		c.errorPage(w, r, nil, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !tokenEqual(r.PostFormValue("csrf"), ck.Value) {
		c.errorPage(w, r, nil, http.StatusForbidden,
			"The sign-in form was out of date or came from another site (CSRF check failed). Open the sign-in page again; cookies must be enabled.")
		return
	}
	mode := r.PostFormValue("mode")
	var user, pass string
	switch mode {
	case "admin":
		user, pass = r.PostFormValue("username"), r.PostFormValue("password")
	case "app":
		user, pass = r.PostFormValue("app_key"), r.PostFormValue("master_secret")
	default:
		c.errorPage(w, r, nil, http.StatusBadRequest, "Unknown sign-in mode.")
		return
	}
	d := loginData{Mode: mode, User: user}
	if user == "" || pass == "" {
		if mode == "admin" {
			d.Error = "Enter the user name and the password."
		} else {
			d.Error = "Enter the app key and the master secret."
		}
		c.renderLogin(w, r, http.StatusBadRequest, d)
		return
	}
	if len(user) > maxUserLen {
		d.User = ""
		d.Error = fmt.Sprintf("The user name or app key is longer than %d bytes.", maxUserLen)
		c.renderLogin(w, r, http.StatusBadRequest, d)
		return
	}
	key := lockKey(r, user)
	left, busy := c.beginAttempt(key)
	if left > 0 {
		d.Error = lockedMessage(user, left)
		c.renderLogin(w, r, http.StatusTooManyRequests, d)
		return
	}
	if busy {
		d.Error = "Another sign-in for this user from your address is being checked; try again in a second."
		c.renderLogin(w, r, http.StatusTooManyRequests, d)
		return
	}
	s, err := c.verify(r, mode, creds{user, pass})
	var bad *badCreds
	if !errors.As(err, &bad) {
		c.endAttempt(key)
	}
	switch {
	case bad != nil:
		c.refuseCredentials(w, r, key, user, d, bad)
		return
	case err != nil:
		c.verifyFailed(w, r, d, err)
		return
	}
	c.mu.Lock()
	delete(c.fails, key)
	c.mu.Unlock()
	// A fresh id at every sign-in: an id planted before cannot be
	// promoted to a signed-in session.
	if old, _ := c.session(r); old != nil {
		c.endSession(w, r, old)
	}
	c.newSession(w, r, s)
	to := Prefix
	if !s.admin {
		to = Prefix + "apps/" + url.PathEscape(s.appKey)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// refuseCredentials answers a sign-in refused for its credentials. It
// counts the failure against key, and says so when that locks the user out.
func (c *Console) refuseCredentials(w http.ResponseWriter, r *http.Request, key, user string, d loginData, bad *badCreds) {
	// The delay holds the attempt open, so the next guess waits too.
	c.sleep(r, FailureDelay)
	left := c.failed(key)
	c.endAttempt(key)
	if left > 0 {
		d.Error = lockedMessage(user, left)
		c.renderLogin(w, r, http.StatusTooManyRequests, d)
		return
	}
	d.Error = bad.msg
	c.renderLogin(w, r, http.StatusUnauthorized, d)
}

// verifyFailed answers a sign-in whose credentials could not be checked:
// the API throttled it, refused it for another reason, or was not reached.
func (c *Console) verifyFailed(w http.ResponseWriter, r *http.Request, d loginData, err error) {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
		// The API's own throttle of failed authentication.
		d.Error = "Too many failed sign-ins: " + ae.Message
		c.renderLogin(w, r, http.StatusTooManyRequests, d)
		return
	}
	if errors.As(err, &ae) {
		d.Error = "The service could not check the credentials: " + ae.Message
	} else {
		c.log.Error("console sign-in failed", "err", err)
		d.Error = "Internal error; try again."
	}
	c.renderLogin(w, r, http.StatusBadGateway, d)
}

func lockedMessage(user string, left time.Duration) string {
	mins := int((left + time.Minute - 1) / time.Minute)
	return fmt.Sprintf("Too many failed sign-ins for %q from your address. Sign-in is locked for %d more minute(s); wait and try again.", user, mins)
}

// badCreds is a sign-in refused for its credentials.
type badCreds struct{ msg string }

func (e *badCreds) Error() string { return e.msg }

// verify checks credentials by calling the API with them, as a script
// would, and returns the session they open.
func (c *Console) verify(r *http.Request, mode string, cr creds) (*session, error) {
	if mode == "admin" {
		var out apitypes.AppList
		err := c.call(r, cr, http.MethodGet, "/admin/v1/apps", nil, nil, &out)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return nil, &badCreds{"Wrong user name or password."}
		}
		if err != nil {
			return nil, err
		}
		// An app's own credentials list exactly that app; they belong in
		// the other form, where the session is limited to the app.
		if len(out.Apps) == 1 && out.Apps[0].Key == cr.user {
			return nil, &badCreds{"These are an app's key and master secret: use the App owner form."}
		}
		return &session{admin: true, who: cr.user, cr: cr}, nil
	}
	var app apitypes.App
	err := c.call(r, cr, http.MethodGet, "/admin/v1/apps/"+url.PathEscape(cr.user), nil, nil, &app)
	var ae *apiError
	if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.notFound()) {
		return nil, &badCreds{"Wrong app key or master secret."}
	}
	if err != nil {
		return nil, err
	}
	// The admin account can read any app too; only the app's own secret
	// opens an app owner's session.
	if app.Key != cr.user || !tokenEqual(cr.pass, app.MasterSecret) {
		return nil, &badCreds{"Wrong app key or master secret."}
	}
	return &session{who: app.Name + " (" + app.Key + ")", cr: cr, appKey: app.Key}, nil
}

// credsValid tells whether the session's credentials still authenticate:
// an app's master secret may have been rotated elsewhere.
func (c *Console) credsValid(q *req) bool {
	mode := "app"
	if q.s.admin {
		mode = "admin"
	}
	_, err := c.verify(q.r, mode, q.s.cr)
	return err == nil
}

func (c *Console) logout(q *req) (string, error) {
	q.c.endSession(q.w, q.r, q.s)
	return "/console/login?signed_out=1", nil
}
