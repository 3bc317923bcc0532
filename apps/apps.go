package apps

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// Limits of an app.
const (
	// MaxNameLen bounds an app's name, in bytes.
	MaxNameLen = 64
	// KeyLen, MasterSecretLen and SigningSecretLen are the lengths of the
	// generated credentials.
	KeyLen           = 24
	MasterSecretLen  = 32
	SigningSecretLen = 32
)

// New returns a new app with a generated key, master secret and callback
// signing secret. The caller stores it.
func New(name string) store.App {
	return store.App{
		Key:           secret.Alnum(KeyLen),
		Name:          name,
		MasterSecret:  NewMasterSecret(),
		SigningSecret: secret.Alnum(SigningSecretLen),
		CreatedAt:     time.Now().Unix(),
	}
}

// NewMasterSecret returns a new generated master secret.
func NewMasterSecret() string { return secret.Alnum(MasterSecretLen) }

// Store is what the Service needs of the store.
type Store interface {
	CreateApp(ctx context.Context, app store.App) error
}

// Cache holds apps read before and changes them through to the store, so
// that a change applies at once to every reader of the cache
// (*appcache.Cache is one).
type Cache interface {
	// Forget drops key, which a new app's key must not stay cached as
	// missing.
	Forget(key string)
	// Update is store.Store.UpdateApp, keeping the cache in step.
	Update(ctx context.Context, key string, fn func(*store.App) error) (store.App, error)
}

// Config holds the app rules that the service configuration sets.
type Config struct {
	// DefaultRateLimit is the requests per second allowed per app and
	// category when the app sets none; 0 means unlimited.
	DefaultRateLimit int
}

// RateCategories are the categories of requests rate-limited per app.
var RateCategories = []string{store.CategoryCreate, store.CategoryProperty, store.CategoryMessage, store.CategoryQuery, store.CategoryCommand}

// MaxRateLimit bounds a category's limit, in requests per second.
const MaxRateLimit = 1_000_000

// Service creates apps and changes their settings.
type Service struct {
	cfg   Config
	store Store
	cache Cache
}

// NewService returns a Service that creates apps in st and changes them
// through cache.
func NewService(cfg Config, st Store, cache Cache) *Service {
	return &Service{cfg: cfg, store: st, cache: cache}
}

// Create stores a new app named name and returns it, credentials
// included. A *errdefs.InvalidError for a name that is empty or longer
// than MaxNameLen bytes.
func (s *Service) Create(ctx context.Context, name string) (store.App, error) {
	if name == "" || len(name) > MaxNameLen {
		return store.App{}, errdefs.Invalid("name", "must be 1 to %d bytes", MaxNameLen)
	}
	app := New(name)
	if err := s.store.CreateApp(ctx, app); err != nil {
		return store.App{}, fmt.Errorf("create app: %w", err)
	}
	s.cache.Forget(app.Key)
	return app, nil
}

// RotateMasterSecret gives the app key a new master secret and returns
// the app. The old secret stops working at once here, and on other nodes
// within appcache.TTL.
func (s *Service) RotateMasterSecret(ctx context.Context, key string) (store.App, error) {
	secret := NewMasterSecret()
	app, err := s.cache.Update(ctx, key, func(app *store.App) error {
		app.MasterSecret = secret
		return nil
	})
	if err != nil {
		return store.App{}, fmt.Errorf("update app: %w", err)
	}
	return app, nil
}

// SetModel replaces the app's property model; a *errdefs.InvalidError
// names the first entry that breaks a rule (shadow.ValidateModel).
func (s *Service) SetModel(ctx context.Context, key string, model []store.PropertyDef) error {
	if err := shadow.ValidateModel(model); err != nil {
		return err
	}
	_, err := s.cache.Update(ctx, key, func(app *store.App) error {
		app.Properties = model
		return nil
	})
	if err != nil {
		return fmt.Errorf("update app: %w", err)
	}
	return nil
}

// RateLimits returns the app's limit of every category, the default
// where the app sets none.
func (s *Service) RateLimits(app store.App) map[string]int {
	out := make(map[string]int, len(RateCategories))
	for _, cat := range RateCategories {
		n, ok := app.RateLimits[cat]
		if !ok {
			n = s.cfg.DefaultRateLimit
		}
		out[cat] = n
	}
	return out
}

// SetRateLimits sets the limits of the categories in changes and returns
// every category's. They are applied to the stored app under its lock,
// so concurrent changes to different categories both land. A
// *errdefs.InvalidError for a limit outside 0 (unlimited) to
// MaxRateLimit.
func (s *Service) SetRateLimits(ctx context.Context, key string, changes map[string]int64) (map[string]int, error) {
	for _, cat := range RateCategories {
		if n, ok := changes[cat]; ok && (n < 0 || n > MaxRateLimit) {
			return nil, errdefs.Invalid(cat, "must be 0 (unlimited) to %d requests per second", MaxRateLimit)
		}
	}
	app, err := s.cache.Update(ctx, key, func(app *store.App) error {
		limits := s.RateLimits(*app)
		for cat, n := range changes {
			limits[cat] = int(n)
		}
		app.RateLimits = limits
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("update app: %w", err)
	}
	return app.RateLimits, nil
}

// CallbackChange changes an app's callback switch and record types; nil
// fields stay.
type CallbackChange struct {
	Enabled *bool
	// Types, when not nil, replaces the record types sent ([] sends
	// none).
	Types []int
}

// SetCallback applies ch to the app's callback settings and returns the
// app.
func (s *Service) SetCallback(ctx context.Context, key string, ch CallbackChange) (store.App, error) {
	return s.update(ctx, key, func(app *store.App) error {
		if ch.Enabled != nil {
			app.Callback.Enabled = *ch.Enabled
		}
		if ch.Types != nil {
			app.Callback.Types = ch.Types
		}
		return nil
	})
}

// CheckAddable refuses a callback URL that cb has already (a
// *errdefs.ConflictError) or that would be one too many (a
// *errdefs.InvalidError).
func CheckAddable(cb store.CallbackSettings, u string) error {
	if cb.Has(u) {
		return errdefs.Conflict("callback URL", u, "is already configured")
	}
	if len(cb.URLs) >= store.MaxCallbackURLs {
		return &errdefs.InvalidError{Field: "url", Message: fmt.Sprintf("at most %d callback URLs can be configured; delete one first", store.MaxCallbackURLs)}
	}
	return nil
}

// AddCallbackURL adds u, which the caller has checked and verified, to
// the app's callback URLs; the first URL becomes the default. CheckAddable
// is applied again under the app's lock, as a concurrent change may have
// made the caller's check stale.
func (s *Service) AddCallbackURL(ctx context.Context, key, u string) (store.App, error) {
	return s.update(ctx, key, func(app *store.App) error {
		if err := CheckAddable(app.Callback, u); err != nil {
			return err
		}
		app.Callback.URLs = append(app.Callback.URLs, store.CallbackURL{URL: u, Default: len(app.Callback.URLs) == 0})
		return nil
	})
}

// SetDefaultCallbackURL makes u, which must be configured, the only
// default.
func (s *Service) SetDefaultCallbackURL(ctx context.Context, key, u string) (store.App, error) {
	return s.update(ctx, key, func(app *store.App) error {
		if !app.Callback.Has(u) {
			return notConfigured(u)
		}
		for i := range app.Callback.URLs {
			app.Callback.URLs[i].Default = app.Callback.URLs[i].URL == u
		}
		return nil
	})
}

// DeleteCallbackURL removes u, any configured URL but the default.
func (s *Service) DeleteCallbackURL(ctx context.Context, key, u string) (store.App, error) {
	return s.update(ctx, key, func(app *store.App) error {
		i := slices.IndexFunc(app.Callback.URLs, func(cu store.CallbackURL) bool { return cu.URL == u })
		if i < 0 {
			return notConfigured(u)
		}
		if app.Callback.URLs[i].Default {
			return &errdefs.InvalidError{Field: "url", Message: "the default URL cannot be deleted; make another URL the default first"}
		}
		app.Callback.URLs = slices.Delete(app.Callback.URLs, i, i+1)
		return nil
	})
}

func notConfigured(u string) error {
	return &errdefs.InvalidError{Field: "url", Message: fmt.Sprintf("callback URL %q is not configured", u)}
}

// update applies fn to the app through the cache.
func (s *Service) update(ctx context.Context, key string, fn func(*store.App) error) (store.App, error) {
	app, err := s.cache.Update(ctx, key, fn)
	if err != nil {
		return store.App{}, fmt.Errorf("update app: %w", err)
	}
	return app, nil
}
