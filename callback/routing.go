package callback

import (
	"slices"

	"github.com/devmsg/devmsg/store"
)

// sends reports whether the app's settings send records of type typ: all
// types when none are chosen (DESIGN.md section 4).
func sends(cb store.CallbackSettings, typ int) bool {
	return cb.Types == nil || slices.Contains(cb.Types, typ)
}

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
