package callback

import (
	"encoding/base64"

	"github.com/devmsg/devmsg/store"
)

// signingSecretPrefix marks a Standard Webhooks signing secret, which
// receivers' libraries expect in front of the base64 key.
const signingSecretPrefix = "whsec_"

// SigningKey returns the HMAC-SHA256 key that signs the app's callbacks:
// the bytes of its stored signing secret.
func SigningKey(app store.App) []byte {
	return []byte(app.SigningSecret)
}

// SigningSecret returns the app's signing key in the Standard Webhooks
// form that receivers configure: "whsec_" and the base64 of the key.
func SigningSecret(app store.App) string {
	return signingSecretPrefix + base64.StdEncoding.EncodeToString(SigningKey(app))
}
