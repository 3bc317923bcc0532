package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"github.com/devmsg/devmsg/store"
)

// signingSecretPrefix marks a Standard Webhooks signing secret, which
// receivers' libraries expect in front of the base64 key.
const signingSecretPrefix = "whsec_"

// SigningKey returns the HMAC-SHA256 key that signs the app's deliveries:
// the bytes of its stored signing secret.
func SigningKey(app store.App) []byte {
	return []byte(app.SigningSecret)
}

// SigningSecret returns the app's signing key in the Standard Webhooks
// form that receivers configure: "whsec_" and the base64 of the key.
func SigningSecret(app store.App) string {
	return signingSecretPrefix + base64.StdEncoding.EncodeToString(SigningKey(app))
}

// Sign returns the Standard Webhooks signature header value of a
// delivery: "v1," and the base64 HMAC-SHA256 of "id.timestamp.body".
func Sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
