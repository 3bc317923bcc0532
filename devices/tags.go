package devices

import (
	"context"
	"slices"
	"strconv"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Limits of tags (docs/api.md, "Tags").
const (
	MaxTags      = 20
	MaxTagLength = 64
)

// ValidateTag checks one tag: 1 to MaxTagLength characters of letters,
// digits and - _ . : @. field names it in the error (a
// *errdefs.InvalidError), for example "tags[2]".
func ValidateTag(field, tag string) error {
	if len(tag) < 1 || len(tag) > MaxTagLength {
		return errdefs.Invalid(field, "must be 1 to %d characters, got %d", MaxTagLength, len(tag))
	}
	for _, r := range tag {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.' || r == ':' || r == '@') {
			return errdefs.Invalid(field, "%q has %q; only letters, digits and - _ . : @ are allowed", tag, r)
		}
	}
	return nil
}

// NormalizeTags validates a device's tag set and returns it sorted with
// repeats dropped (a set: order and repeats carry no meaning), nil for
// none. field names the list in errors: "tags" or "device[3].tags".
func NormalizeTags(field string, tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, errdefs.Invalid(field, "must hold at most %d tags, got %d", MaxTags, len(tags))
	}
	for i, t := range tags {
		if err := ValidateTag(field+"["+strconv.Itoa(i)+"]", t); err != nil {
			return nil, err
		}
	}
	if len(tags) == 0 {
		return nil, nil
	}
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// SetTags replaces the device's tags with tags (validated and normalized
// as NormalizeTags does) and returns the device. A *errdefs.NotFoundError
// for an unknown device.
func (s *Service) SetTags(ctx context.Context, appKey, name string, tags []string) (store.Device, error) {
	tags, err := NormalizeTags("tags", tags)
	if err != nil {
		return store.Device{}, err
	}
	d, err := s.store.UpdateDevice(ctx, appKey, name, func(d *store.Device) error {
		d.Tags = tags
		return nil
	})
	return d, notFound(name, err, "set tags")
}
