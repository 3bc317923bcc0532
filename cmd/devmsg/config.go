package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/fdbudget"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/restapi"
)

// Config is the service configuration; docs/configuration.md lists its
// keys, their defaults and their environment variables.
type Config struct {
	DataDir   string          `yaml:"data_dir"`
	Log       LogConfig       `yaml:"log"`
	HTTP      HTTPConfig      `yaml:"http"`
	MQTT      MQTTConfig      `yaml:"mqtt"`
	Store     StoreConfig     `yaml:"store"`
	NodeID    int             `yaml:"node_id"`
	Admin     AdminConfig     `yaml:"admin"`
	Apps      []AppConfig     `yaml:"apps" env:"-"`
	RateLimit RateLimitConfig `yaml:"rate_limit"`
	Callback  CallbackConfig  `yaml:"callback"`
	Events    EventsConfig    `yaml:"events"`
	Broadcast BroadcastConfig `yaml:"broadcast"`
	// FDReserve is how many file descriptors are kept from client
	// connections for the store, Redis, callbacks and webhooks (at most a
	// quarter of the process's limit).
	FDReserve int `yaml:"fd_reserve"`
}

// LogConfig chooses how much the service logs and in which format.
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// HTTPConfig is the listener of the REST API, admin API and operations
// endpoints.
type HTTPConfig struct {
	Addr string    `yaml:"addr"`
	TLS  TLSConfig `yaml:"tls"`
	// MaxConnsPerSource caps the connections open from one IP address;
	// 0 is no cap.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
	// MaxLongPollsPerApp caps the long-polls one app has waiting at once
	// on this node; 0 is no cap.
	MaxLongPollsPerApp int `yaml:"max_long_polls_per_app"`
}

// TLSConfig turns HTTPS on or off and names the certificate; with no files
// a self-signed certificate is generated once into data_dir/tls.
type TLSConfig struct {
	Enabled  bool   `yaml:"enabled"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// MQTTConfig holds the device listener addresses; "" disables one.
type MQTTConfig struct {
	TCPAddr string `yaml:"tcp_addr"`
	TLSAddr string `yaml:"tls_addr"`
	WSAddr  string `yaml:"ws_addr"`
	// MaxConnsPerSource caps the device connections open from one IP
	// address, over all three listeners; 0 is no cap.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
}

// StoreConfig picks the storage backend.
type StoreConfig struct {
	Type  string      `yaml:"type"`
	Redis RedisConfig `yaml:"redis"`
	// MinFreeMB is the free space, in MiB, below which the embedded
	// store refuses writes that add data; 0 turns the floor off.
	MinFreeMB int `yaml:"min_free_mb"`
}

// RedisConfig is the connection of the redis backend (cluster mode).
type RedisConfig struct {
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master name: set, Addrs are Sentinels.
	MasterName string `yaml:"master_name"`
	Password   string `yaml:"password"`
	DB         int    `yaml:"db"`
}

// AdminConfig is the admin account; an empty password is generated on the
// first start and printed once.
type AdminConfig struct {
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// AppConfig is an app created at start if missing, with exactly these
// credentials, so deployments can provision apps declaratively.
type AppConfig struct {
	Name         string `yaml:"name"`
	Key          string `yaml:"key"`
	MasterSecret string `yaml:"master_secret"`
}

// RateLimitConfig is the default per-app rate limit.
type RateLimitConfig struct {
	// Default is requests per second per app and category; 0 is unlimited.
	Default int `yaml:"default"`
}

// BroadcastConfig paces the fan-out of broadcasts (docs/api.md,
// "Broadcast").
type BroadcastConfig struct {
	// Rate is the most broadcast messages made per second; 0 takes
	// message.DefaultFanoutRate (250,000).
	Rate int `yaml:"rate"`
	// YieldRate is the most made per second while single sends are
	// made; 0 takes message.DefaultFanoutYieldRate.
	YieldRate int `yaml:"yield_rate"`
	// Chunk is how many devices one fan-out write reaches; 0 takes
	// message.DefaultFanoutChunk.
	Chunk int `yaml:"chunk"`
}

// CallbackConfig tunes message-status callback delivery
// (docs/callbacks.md).
type CallbackConfig struct {
	BatchSize        int      `yaml:"batch_size"`
	FlushInterval    Duration `yaml:"flush_interval"`
	RetryInterval    Duration `yaml:"retry_interval"`
	MaxRetries       int      `yaml:"max_retries"`
	RequestTimeout   Duration `yaml:"request_timeout"`
	AllowCustomPorts bool     `yaml:"allow_custom_ports"`
	// AllowedNetworks are CIDRs exempt from the address guard: callback
	// URLs may reach them although they are loopback, private and so on.
	AllowedNetworks []string `yaml:"allowed_networks"`
}

// EventsConfig bounds the event log of every app and shapes the batches of
// its webhooks (docs/events.md, "Retention and sizing" and "Webhooks").
type EventsConfig struct {
	// Retention is how long an event is kept.
	Retention Duration `yaml:"retention"`
	// MaxPerApp is the most events an app's log keeps; the oldest go first.
	MaxPerApp int `yaml:"max_per_app"`
	// BatchSize is the most events in one webhook POST.
	BatchSize int `yaml:"batch_size"`
	// Linger is how long a webhook batch waits for more events after
	// its first.
	Linger Duration `yaml:"linger"`
}

// domain returns the settings as package events takes them.
func (e EventsConfig) domain() events.Config {
	return events.Config{Retention: time.Duration(e.Retention), MaxPerApp: e.MaxPerApp,
		BatchSize: e.BatchSize, Linger: time.Duration(e.Linger)}
}

// Duration is a time.Duration written as "10s" in YAML, env and flags.
type Duration time.Duration

// UnmarshalYAML parses "10s". A bad value is reported as a *yaml.TypeError
// so readConfigFile can name the key like it does for other type errors.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration like 10s", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration the way it is read, e.g. "10s".
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

func defaultConfig() Config {
	return Config{
		DataDir: "./data",
		Log:     LogConfig{Level: "info", Format: "text"},
		HTTP: HTTPConfig{Addr: ":8443", TLS: TLSConfig{Enabled: true},
			MaxConnsPerSource: defaultConnsPerSource, MaxLongPollsPerApp: restapi.DefaultMaxLongPollsPerApp},
		MQTT: MQTTConfig{TCPAddr: ":1883", TLSAddr: ":8883", WSAddr: ":8083", MaxConnsPerSource: defaultConnsPerSource},
		Store: StoreConfig{Type: "embedded", Redis: RedisConfig{Addrs: []string{"127.0.0.1:6379"}},
			MinFreeMB: defaultMinFreeMB},
		FDReserve: fdbudget.DefaultReserve,
		Admin:     AdminConfig{Username: "admin"},
		RateLimit: RateLimitConfig{Default: 1000},
		Callback: CallbackConfig{
			BatchSize:      100,
			FlushInterval:  Duration(10 * time.Second),
			RetryInterval:  Duration(50 * time.Second),
			MaxRetries:     3,
			RequestTimeout: Duration(10 * time.Second),
		},
		Events: EventsConfig{
			Retention: Duration(24 * time.Hour),
			MaxPerApp: 1_000_000,
			BatchSize: 100,
			Linger:    Duration(200 * time.Millisecond),
		},
	}
}

// loadConfig builds the configuration: defaults, then the --config file,
// then DEVMSG_* environment variables, then flags, and validates it.
func loadConfig(args []string, env []string) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	file := fs.String("config", "", "YAML config file")
	leaves := configLeaves(&cfg)
	flagVals := map[string]*string{}
	for _, l := range leaves {
		flagVals[l.path] = new(string)
		record := func(s string) error {
			*flagVals[l.path] = s
			return l.set(s)
		}
		if l.isBool {
			fs.BoolFunc(l.path, "config key "+l.path, record)
		} else {
			fs.Func(l.path, "config key "+l.path, record)
		}
	}
	// First pass only to find --config; values are applied in order below.
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg = defaultConfig()
	leaves = configLeaves(&cfg)
	if *file != "" {
		if err := readConfigFile(*file, &cfg); err != nil {
			return cfg, err
		}
	}
	envs := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			envs[k] = v
		}
	}
	if err := checkEnvNames(leaves, envs); err != nil {
		return cfg, err
	}
	for _, l := range leaves {
		if v, ok := envs[l.env]; ok {
			if err := l.set(v); err != nil {
				return cfg, fmt.Errorf("config: %s: %w", l.env, err)
			}
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, l := range leaves {
		if set[l.path] {
			if err := l.set(*flagVals[l.path]); err != nil {
				return cfg, fmt.Errorf("config: --%s: %w", l.path, err)
			}
		}
	}
	return cfg, cfg.Validate()
}

func readConfigFile(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err = dec.Decode(cfg)
	var te *yaml.TypeError
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &te):
		return fmt.Errorf("config %s: %s", path, nameKeys(data, te))
	default:
		return fmt.Errorf("config %s: %s", path, syntaxLine(data, err))
	}
}

var syntaxRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxLine puts the line at fault in a YAML syntax error. yaml.v3 gives
// the line where the block around the fault began (a key indented one
// space too far on line 9 is "line 7: did not find expected key", line 7
// opening its mapping), or the end of the document. The first run of
// whole lines from the top that fails with the same problem ends at the
// line at fault; a shorter run failing otherwise (a flow mapping not yet
// closed) is passed over.
func syntaxLine(data []byte, err error) string {
	m := syntaxRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for n := 1; n <= len(lines); n++ {
		var node yaml.Node
		e := yaml.Unmarshal(bytes.Join(lines[:n], nil), &node)
		if pm := syntaxRE.FindStringSubmatch(fmt.Sprint(e)); pm != nil && pm[2] == m[2] {
			if m[2] == "found unexpected end of stream" {
				return fmt.Sprintf("line %d: a quote or bracket opened here is never closed (%s)", n, m[2])
			}
			return fmt.Sprintf("line %d: %s", n, m[2])
		}
	}
	return err.Error()
}

var (
	lineRE     = regexp.MustCompile(`^line (\d+): `)
	notFoundRE = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

// nameKeys rewrites yaml.v3's type errors, which give only a line, so each
// names the dotted key it is about: `line 2: callback.flush_interval: "soon"
// is not a duration like 10s`, `line 1: unknown key "htp"`.
func nameKeys(data []byte, te *yaml.TypeError) string {
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // it decoded once already
	keys := keyLines(&root)
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		msgs[i] = e
		m := lineRE.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		key, rest := keys[line], e[len(m[0]):]
		switch {
		case key == "":
			// Several keys share the line (a flow mapping): keep the line only.
		case notFoundRE.MatchString(rest):
			msgs[i] = fmt.Sprintf("%sunknown key %q", m[0], key)
		default:
			msgs[i] = fmt.Sprintf("%s%s: %s", m[0], key, rest)
		}
	}
	return strings.Join(msgs, "; ")
}

// keyLines maps each line of a YAML document to the dotted key written on
// it, or to "" when several keys share the line. A line with no key (an
// item of a block list) maps to the outermost value that starts on it.
func keyLines(root *yaml.Node) map[int]string {
	keys, values := map[int]string{}, map[int]string{}
	claimKey := func(line int, path string) {
		if p, ok := keys[line]; ok && p != path {
			path = ""
		}
		keys[line] = path
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				claimKey(k.Line, p)
				walk(v, p)
			}
		case yaml.SequenceNode:
			if _, ok := values[n.Line]; !ok {
				values[n.Line] = path
			}
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			if _, ok := values[n.Line]; !ok {
				values[n.Line] = path
			}
		}
	}
	walk(root, "")
	for line, p := range values {
		if _, ok := keys[line]; !ok {
			keys[line] = p
		}
	}
	return keys
}

// leaf is one scalar configuration key.
type leaf struct {
	path string // dotted yaml path, e.g. http.tls.enabled
	env  string // DEVMSG_HTTP_TLS_ENABLED
	set  func(string) error
	val  func() string // the current value, as a flag would take it
	// isBool lets a flag stand alone: --http.tls.enabled means true.
	isBool bool
}

// configLeaves lists every scalar key of cfg by reflection over the yaml
// tags, so env variables and flags cover every key with no list to keep.
func configLeaves(cfg *Config) []leaf {
	var out []leaf
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Tag.Get("env") == "-" {
				continue
			}
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(fv, path)
				continue
			}
			out = append(out, leaf{
				path:   path,
				env:    "DEVMSG_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_")),
				set:    func(s string) error { return setScalar(fv, s) },
				val:    func() string { return formatScalar(fv) },
				isBool: fv.Kind() == reflect.Bool,
			})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

func formatScalar(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeOf(Duration(0)):
		return time.Duration(v.Int()).String()
	case v.Kind() == reflect.Slice:
		return strings.Join(v.Interface().([]string), ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}

// writeServeUsage lists every key with its flag, env name and default.
func writeServeUsage(w io.Writer) {
	cfg := defaultConfig()
	fmt.Fprintln(w, "usage: devmsg serve [--config FILE] [--KEY=VALUE ...]")
	fmt.Fprintln(w, "\nLayers, each overriding the one before: defaults, --config FILE (YAML),")
	fmt.Fprintln(w, "environment DEVMSG_<KEY>, flags --<key>. Keys:")
	for _, l := range configLeaves(&cfg) {
		fmt.Fprintf(w, "  --%-30s %-34s default %q\n", l.path, l.env, l.val())
	}
	fmt.Fprintln(w, "  apps: file only; see configs/devmsg.yaml and docs/configuration.md")
}

func setScalar(v reflect.Value, s string) error {
	if v.Type() == reflect.TypeOf(Duration(0)) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 10s", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		v.SetInt(int64(n))
	case reflect.Slice:
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported config kind %s", v.Kind())
	}
	return nil
}

// Validate reports the first bad value, naming its key.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateServer, c.validateApps, c.validateCallback, c.validateEvents, c.validateLimits} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// badConfig is the error for a bad value at key.
func badConfig(key, format string, args ...any) error {
	return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
}

// validateServer checks the keys of the process: data, log, ports, store,
// node and accounts.
func (c Config) validateServer() error {
	bad := badConfig
	if c.DataDir == "" {
		return bad("data_dir", "must not be empty")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return bad("log.format", "%q is not text or json", c.Log.Format)
	}
	if c.HTTP.Addr == "" {
		return bad("http.addr", "must not be empty")
	}
	if (c.HTTP.TLS.CertFile == "") != (c.HTTP.TLS.KeyFile == "") {
		return bad("http.tls", "cert_file and key_file must be set together")
	}
	switch c.Store.Type {
	case "embedded":
	case "redis":
		if len(c.Store.Redis.Addrs) == 0 {
			return bad("store.redis.addrs", "must list at least one address")
		}
	default:
		return bad("store.type", "%q is not embedded or redis", c.Store.Type)
	}
	if c.NodeID < 0 || c.NodeID > idgen.MaxNode {
		return bad("node_id", "%d is outside 0..%d (7 bits of every msgid and op_id)", c.NodeID, idgen.MaxNode)
	}
	if c.Admin.Username == "" {
		return bad("admin.username", "must not be empty")
	}
	if c.Broadcast.Rate < 0 {
		return bad("broadcast.rate", "%d is negative (0 takes the default)", c.Broadcast.Rate)
	}
	if c.Broadcast.YieldRate < 0 {
		return bad("broadcast.yield_rate", "%d is negative (0 takes the default)", c.Broadcast.YieldRate)
	}
	if c.Broadcast.Chunk < 0 || c.Broadcast.Chunk > 1000 {
		return bad("broadcast.chunk", "%d is not 0 to 1000", c.Broadcast.Chunk)
	}
	if c.RateLimit.Default < 0 {
		return bad("rate_limit.default", "%d is negative (0 means unlimited)", c.RateLimit.Default)
	}
	return nil
}

// validateApps checks the configured apps, each complete and unique.
func (c Config) validateApps() error {
	bad := badConfig
	names, keys := map[string]bool{}, map[string]bool{}
	for i, a := range c.Apps {
		key := fmt.Sprintf("apps[%d]", i)
		switch {
		case a.Name == "":
			return bad(key+".name", "must not be empty")
		case a.Key == "":
			return bad(key+".key", "must not be empty")
		case a.MasterSecret == "":
			return bad(key+".master_secret", "must not be empty")
		case strings.ContainsAny(a.Key, "\x00/:") || len(a.Key) > 64:
			return bad(key+".key", "must be at most 64 characters without '/', ':' or NUL")
		case names[a.Name]:
			return bad(key+".name", "%q appears twice", a.Name)
		case keys[a.Key]:
			return bad(key+".key", "%q appears twice", a.Key)
		}
		names[a.Name], keys[a.Key] = true, true
	}
	return nil
}

// validateCallback checks the callback worker's settings.
func (c Config) validateCallback() error {
	bad := badConfig
	cb := c.Callback
	switch {
	case cb.BatchSize < 1 || cb.BatchSize > 1000:
		return bad("callback.batch_size", "%d is outside 1..1000", cb.BatchSize)
	case cb.FlushInterval <= 0:
		return bad("callback.flush_interval", "must be positive")
	case cb.RetryInterval <= 0:
		return bad("callback.retry_interval", "must be positive")
	case cb.MaxRetries < 0:
		return bad("callback.max_retries", "must not be negative")
	case cb.RequestTimeout <= 0:
		return bad("callback.request_timeout", "must be positive")
	}
	if _, err := netguard.ParseNetworks(cb.AllowedNetworks); err != nil {
		return bad("callback.allowed_networks", "%v", err)
	}
	return nil
}

// Bounds of the events keys: a retention under the trim interval could
// not be honoured, and a linger of minutes would make webhooks look dead.
const (
	minEventsRetention = time.Minute
	maxEventsLinger    = 10 * time.Second
)

// validateEvents checks the event log's bounds and the webhook batching.
func (c Config) validateEvents() error {
	bad := badConfig
	ev := c.Events
	switch {
	case time.Duration(ev.Retention) < minEventsRetention:
		return bad("events.retention", "%s is under the minimum of %s", time.Duration(ev.Retention), minEventsRetention)
	case ev.MaxPerApp < 1:
		return bad("events.max_per_app", "%d must be at least 1", ev.MaxPerApp)
	case ev.BatchSize < 1 || ev.BatchSize > 1000:
		return bad("events.batch_size", "%d is outside 1..1000", ev.BatchSize)
	case ev.Linger < 0 || time.Duration(ev.Linger) > maxEventsLinger:
		return bad("events.linger", "%s is outside 0s..%s", time.Duration(ev.Linger), maxEventsLinger)
	}
	return nil
}
