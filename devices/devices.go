package devices

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

// Limits of a device's name, mark and secret (docs/api.md, "Conventions"
// and "Create devices in batch").
const (
	MinNameLen   = 4
	MaxNameLen   = 24
	MaxMarkChars = 128
	SecretLen    = 32
)

// ValidateName applies the rule of device names: 4 to 24 characters of
// digits, letters and - _ @ . only.
func ValidateName(name string) error {
	if len(name) < MinNameLen || len(name) > MaxNameLen {
		return fmt.Errorf("device name %q must be %d to %d characters", name, MinNameLen, MaxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '@' || r == '.') {
			return fmt.Errorf("device name %q has %q; only digits, letters and - _ @ . are allowed", name, r)
		}
	}
	return nil
}

// ValidateMark bounds a device's mark to MaxMarkChars characters; a
// *errdefs.InvalidError.
func ValidateMark(mark string) error {
	if n := utf8.RuneCountInString(mark); n > MaxMarkChars {
		return errdefs.Invalid("mark", "must be 0 to %d characters, got %d", MaxMarkChars, n)
	}
	return nil
}

// ValidateFlag accepts store.FlagEnabled and store.FlagDisabled; a
// *errdefs.InvalidError otherwise.
func ValidateFlag(flag int64) error {
	if flag != store.FlagEnabled && flag != store.FlagDisabled {
		return errdefs.Invalid("flag", "must be 0 (enabled) or 1 (disabled)")
	}
	return nil
}

// Store is what the Service needs of the store.
type Store interface {
	CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error)
	GetDevice(ctx context.Context, appKey, name string) (store.Device, error)
	UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error)
	DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error
}

// Events hears of changes a connected device must feel (*mqttapi.API
// is one).
type Events interface {
	// Disabled follows setting a device's flag to disabled.
	Disabled(ctx context.Context, appKey, device string)
	// Deleted comes between the two steps of a deletion (see Delete);
	// an error stops it.
	Deleted(ctx context.Context, appKey, device string) error
}

// Service creates, changes, reads and deletes devices.
type Service struct {
	store  Store
	events Events
	now    func() time.Time
}

// NewService returns a Service on st telling events of disabled and
// deleted devices (nil: nobody is told).
func NewService(st Store, events Events) *Service {
	if events == nil {
		events = noEvents{}
	}
	return &Service{store: st, events: events, now: time.Now}
}

type noEvents struct{}

func (noEvents) Disabled(context.Context, string, string)      {}
func (noEvents) Deleted(context.Context, string, string) error { return nil }

// NewDevice is a device to create: a name, mark and tags already
// validated (tags as NormalizeTags returns them).
type NewDevice struct {
	Name string
	Mark string
	Tags []string
}

// Create creates the app's devices, enabled and each with a generated
// secret, all or none on a storage failure, each with its device.created
// event in the same write. The result has one device per request, its
// Secret set, and one error per request: nil, or a
// *errdefs.ConflictError when the name is taken.
func (s *Service) Create(ctx context.Context, appKey string, news []NewDevice) ([]store.Device, []error, error) {
	now := s.now()
	devices := make([]store.Device, len(news))
	for i, n := range news {
		devices[i] = store.Device{
			AppKey: appKey, Name: n.Name, Mark: n.Mark, Tags: n.Tags,
			Secret: secret.Alnum(SecretLen), TimeCreate: now.Unix(), Flag: store.FlagEnabled,
			Emit: []store.Event{events.New(events.TypeCreated, appKey, n.Name, now, nil)},
		}
	}
	errs, err := s.store.CreateDevices(ctx, appKey, devices)
	if err != nil {
		return nil, nil, fmt.Errorf("create devices: %w", err)
	}
	for i, e := range errs {
		switch {
		case e == nil:
		case errors.Is(e, store.ErrAlreadyExists):
			errs[i] = errdefs.Conflict("device name", devices[i].Name, "already exists")
		default:
			return nil, nil, fmt.Errorf("create device %q: %w", devices[i].Name, e)
		}
	}
	return devices, errs, nil
}

// Get returns the app's device name; a *errdefs.NotFoundError if there is
// none.
func (s *Service) Get(ctx context.Context, appKey, name string) (store.Device, error) {
	d, err := s.store.GetDevice(ctx, appKey, name)
	return d, notFound(name, err, "load device")
}

// Change is a change of a device's settings; nil fields stay.
type Change struct {
	Flag *int
	Mark *string
	// Tags, when not nil, replaces the tags (an empty list removes them).
	Tags *[]string
}

// Update applies ch to the device under its lock, so presence and other
// writers are not overwritten, and returns it. A flag that changes is
// told by a device.enabled or device.disabled event, in the same write.
// Disabling an enabled device tells Events, which disconnects it.
func (s *Service) Update(ctx context.Context, appKey, name string, ch Change) (store.Device, error) {
	if ch.Flag != nil {
		if err := ValidateFlag(int64(*ch.Flag)); err != nil {
			return store.Device{}, err
		}
	}
	if ch.Mark != nil {
		if err := ValidateMark(*ch.Mark); err != nil {
			return store.Device{}, err
		}
	}
	if ch.Tags != nil {
		tags, err := NormalizeTags("tags", *ch.Tags)
		if err != nil {
			return store.Device{}, err
		}
		ch.Tags = &tags
	}
	var disabled bool
	d, err := s.store.UpdateDevice(ctx, appKey, name, func(d *store.Device) error {
		disabled = ch.Flag != nil && *ch.Flag == store.FlagDisabled && d.Flag != store.FlagDisabled
		if ch.Flag != nil && *ch.Flag != d.Flag {
			typ := events.TypeEnabled
			if *ch.Flag == store.FlagDisabled {
				typ = events.TypeDisabled
			}
			d.Emit = []store.Event{events.New(typ, appKey, name, s.now(), nil)}
			d.Flag = *ch.Flag
		}
		if ch.Mark != nil {
			d.Mark = *ch.Mark
		}
		if ch.Tags != nil {
			d.Tags = *ch.Tags
		}
		return nil
	})
	if err != nil {
		return d, notFound(name, err, "update device")
	}
	if disabled {
		s.events.Disabled(ctx, appKey, name)
	}
	return d, nil
}

// Delete removes the device (docs/api.md, "Delete a device"). The steps
// are ordered so that no message is left pending for a device that is
// gone: the device is disabled first, so from then on it cannot connect
// and sends to it fail with record 1; then Events disconnects it and fails its
// pending messages with record 5 (3007); only then is it removed. Its
// messages stay readable by msgid. The removal writes the device.deleted
// event; the disabling on the way is part of the deletion and has no
// event of its own. Once begun the steps run to the end, whatever happens
// to ctx's caller.
func (s *Service) Delete(ctx context.Context, appKey, name string) error {
	ctx = context.WithoutCancel(ctx)
	_, err := s.store.UpdateDevice(ctx, appKey, name, func(d *store.Device) error {
		d.Flag = store.FlagDisabled
		return nil
	})
	if err != nil {
		return notFound(name, err, "disable device")
	}
	if err := s.events.Deleted(ctx, appKey, name); err != nil {
		return fmt.Errorf("delete device: %w", err)
	}
	// ErrNotFound here: a concurrent delete won.
	deleted := events.New(events.TypeDeleted, appKey, name, s.now(), nil)
	return notFound(name, s.store.DeleteDevice(ctx, appKey, name, deleted), "delete device")
}

// notFound turns the store's ErrNotFound into the device's not-found
// error and wraps any other error with what failed.
func notFound(name string, err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return errdefs.NotFound("device", name)
	}
	return fmt.Errorf("%s: %w", what, err)
}
