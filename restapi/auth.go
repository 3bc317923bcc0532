package restapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

const (
	ctxApp   = "devmsg.app"   // store.App of the authenticated app
	ctxAdmin = "devmsg.admin" // true when the admin account authenticated
)

// authApp authenticates the app's Basic key:master_secret (docs/api.md, Authentication).
func (a *API) authApp(c *gin.Context) { a.authenticate(c, false) }

// authAdmin accepts the admin account, or an app's own credentials; the
// admin handlers then limit an app to itself (see appParam).
func (a *API) authAdmin(c *gin.Context) { a.authenticate(c, true) }

// authenticate checks the Basic credentials, the admin account's too when
// admin, and throttles failures (see authThrottle): a source or identity
// with too many recent failures is answered 429/2002 before its
// credentials are looked at.
func (a *API) authenticate(c *gin.Context, admin bool) {
	user, pass, ok := c.Request.BasicAuth()
	if !ok {
		if admin {
			a.writeError(c, errAuth("authentication failed: HTTP Basic credentials (admin username and password, or app key and master secret) are required"))
			return
		}
		a.writeError(c, errAuth("authentication failed: HTTP Basic credentials (app key and master secret) are required"))
		return
	}
	key := a.throttle.keyOf(sourceOf(c.Request), user)
	if left, bySource := a.throttle.locked(key); left > 0 {
		who := "from your address"
		if !bySource {
			who = "for this app key or user"
		}
		a.writeError(c, &apiError{
			status:     http.StatusTooManyRequests,
			code:       CodeRateLimited,
			message:    fmt.Sprintf("too many failed authentications %s; retry after %d s", who, retryAfter(left)),
			retryAfter: retryAfter(left),
		})
		return
	}
	if admin && user == a.cfg.AdminUsername && a.adminPassword(pass) {
		a.throttle.succeeded(key)
		c.Set(ctxAdmin, true)
		c.Next()
		return
	}
	app, err := a.appFromBasic(c, user, pass)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == CodeAuthFailed {
		a.throttle.failed(key)
	}
	if admin && ae != nil && ae.code == CodeAuthFailed {
		// The admin API answers every failure alike, whether the username
		// was the admin's, an app key or neither: the message tells which
		// credentials it takes, never which usernames exist.
		err = errAuth(adminAuthFailed)
	}
	if err != nil {
		a.writeError(c, err)
		return
	}
	a.throttle.succeeded(key)
	c.Set(ctxApp, app)
	c.Next()
}

// adminAuthFailed is the admin API's answer to wrong credentials.
const adminAuthFailed = "authentication failed: wrong admin username or password (or, for an app, app key or master secret)"

func (a *API) adminPassword(pass string) bool {
	sum := sha256.Sum256([]byte(pass))
	return subtle.ConstantTimeCompare(sum[:], a.cfg.AdminPasswordSHA256[:]) == 1
}

// appFromBasic returns the app whose key and master secret these are.
func (a *API) appFromBasic(c *gin.Context, key, pass string) (store.App, error) {
	app, err := a.apps.Get(c.Request.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		// Compare anyway so an unknown key takes as long as a wrong secret.
		secret.Equal(pass, unknownAppSecret)
		return store.App{}, errAuth("authentication failed: wrong app key or master secret")
	}
	if err != nil {
		return store.App{}, fmt.Errorf("load app: %w", err)
	}
	if !secret.Equal(pass, app.MasterSecret) {
		return store.App{}, errAuth("authentication failed: wrong app key or master secret")
	}
	return app, nil
}

// unknownAppSecret is what a secret presented with an unknown app key is
// compared with: of a master secret's length, matching nothing sent.
const unknownAppSecret = "\x00unknown-app-key-dummy-secret\x00"

func currentApp(c *gin.Context) store.App {
	v, _ := c.Get(ctxApp)
	app, _ := v.(store.App)
	return app
}

func isAdmin(c *gin.Context) bool {
	return c.GetBool(ctxAdmin)
}
