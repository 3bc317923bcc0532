package callback

import (
	"github.com/devmsg/devmsg/store"
)

// target returns where a record goes: the message's temporary URL when
// it is one of the app's configured URLs, else the default URL, else ""
// (nowhere).
func target(cb store.CallbackSettings, temp string) string {
	if temp != "" && cb.Has(temp) {
		return temp
	}
	for _, cu := range cb.URLs {
		if cu.Default {
			return cu.URL
		}
	}
	return ""
}

// route sets r.URL to where the entry h goes by its app's settings cb
// (nil: the app does not exist), or returns why it goes nowhere.
func route(cb *store.CallbackSettings, h store.OutboxHead, r *store.OutboxRoute) (dropped string) {
	switch {
	case cb == nil:
		return "no app"
	case !cb.Enabled:
		return "switch off"
	case !cb.Sends(h.Type):
		return "type not selected"
	}
	if r.URL = target(*cb, h.CallbackURL); r.URL == "" {
		return "no url"
	}
	return ""
}
