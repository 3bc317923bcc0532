package message

import "github.com/devmsg/devmsg/store/pebble"

// The optional store methods the fan-out and batch sends look for are
// outside the store.Store contract, so the compiler checks here that the
// backend which has them still does.
var (
	_ flagEpocher  = (*pebble.Store)(nil)
	_ stepPreparer = (*pebble.Store)(nil)
)
