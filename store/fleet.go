package store

import "context"

// Fleet is the part of the Store contract that addresses many devices at
// once (DESIGN.md section 8): the tag index.
type Fleet interface {
	// ListTagged returns up to limit of the app's devices that carry tag,
	// in name order, starting after the name cursor ("" for the start).
	// It reads the app's tag index, written atomically with every device
	// write, so its cost grows with the devices it returns, not with the
	// app's devices.
	ListTagged(ctx context.Context, appKey, tag, cursor string, limit int) (DevicePage, error)
}
