package restapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

const (
	ctxApp   = "devmsg.app"   // store.App of the authenticated app
	ctxAdmin = "devmsg.admin" // true when the admin account authenticated
)

// authApp authenticates the spec's Basic key:master_secret (section 5).
func (a *API) authApp(c *gin.Context) {
	app, err := a.appFromBasic(c)
	if err != nil {
		a.writeError(c, err)
		return
	}
	c.Set(ctxApp, app)
	c.Next()
}

func (a *API) appFromBasic(c *gin.Context) (store.App, error) {
	key, pass, ok := c.Request.BasicAuth()
	if !ok {
		return store.App{}, errAuth("authentication failed: HTTP Basic credentials (app key and master secret) are required")
	}
	app, err := a.apps.Get(c.Request.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		// Compare anyway so an unknown key takes as long as a wrong secret.
		secret.Equal(pass, key)
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

// authAdmin accepts the admin account, or an app's own credentials; the
// admin handlers then limit an app to itself (see appParam).
func (a *API) authAdmin(c *gin.Context) {
	user, pass, ok := c.Request.BasicAuth()
	if ok && user == a.cfg.AdminUsername {
		sum := sha256.Sum256([]byte(pass))
		if subtle.ConstantTimeCompare(sum[:], a.cfg.AdminPasswordSHA256[:]) == 1 {
			c.Set(ctxAdmin, true)
			c.Next()
			return
		}
	}
	a.authApp(c)
}

func currentApp(c *gin.Context) store.App {
	v, _ := c.Get(ctxApp)
	app, _ := v.(store.App)
	return app
}

func isAdmin(c *gin.Context) bool {
	return c.GetBool(ctxAdmin)
}
