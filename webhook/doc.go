// Package webhook is the outbound HTTP toolkit shared by everything that
// calls an app's own URLs: message-status callbacks (callback), event
// webhooks (events) and `devmsg events --forward-to`. It checks a URL
// against the rules every receiver URL meets and verifies it with the
// echostr handshake, signs a delivery (Basic with the app's key and
// master secret, and the Standard Webhooks headers), sends it through the
// guarded HTTP client (internal/netguard: no loopback, private or
// link-local address unless allowed, no redirect followed), and words a
// failed exchange for the app without an address in it. What is sent, and
// how often it is retried, is the caller's: see docs/callbacks.md and
// docs/events.md.
package webhook
