package restapi

import (
	"time"

	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

// NewApp returns a new app with a generated key, master secret and
// callback signing secret. The caller stores it.
func NewApp(name string) store.App {
	return store.App{
		Key:           secret.Alnum(24),
		Name:          name,
		MasterSecret:  secret.Alnum(MasterSecretLen),
		SigningSecret: secret.Alnum(32),
		CreatedAt:     time.Now().Unix(),
	}
}
