// Package secret generates the random keys, secrets and passwords devmsg
// hands out, and compares presented secrets in constant time.
package secret
