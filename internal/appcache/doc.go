// Package appcache keeps recently used apps in memory for a short time, so
// authenticating a request or routing a callback does not read and decode
// the app from the store every time. The REST API and the callback worker
// each hold one. A change made through another node (a rotated secret, a
// new property model) is seen within TTL, and unknown keys are cached too,
// so a stream of bad keys costs no store reads.
package appcache
