package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/cluster"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/console"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/internal/fdbudget"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/mqttapi"
	"github.com/devmsg/devmsg/presence"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
	"github.com/devmsg/devmsg/store/redis"
)

const (
	// callbackLease is the cluster lease of the callback worker.
	callbackLease = "callbacks"
	// webhookLease is the cluster lease of the event webhooks' delivery.
	webhookLease = "event-webhooks"
	// broadcastLease is the cluster lease of the broadcast fan-out.
	broadcastLease = "broadcasts"
	metaAdminHash  = "admin_password_sha256"
	metaDefaultApp = "default_app_key"
	shutdownBudget = 30 * time.Second
)

// runServe is `devmsg serve`: it runs a Main until ctx is done, the HTTP
// server fails or, in a cluster, another process takes this node_id.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, os.Environ())
	if errors.Is(err, flag.ErrHelp) {
		writeServeUsage(stderr)
		return nil
	}
	if err != nil {
		return err
	}
	m := NewMain()
	m.Config, m.Stdout, m.Stderr = cfg, stdout, stderr
	if err := m.Run(ctx); err != nil {
		_ = m.Close() // nothing is served yet: Close only releases
		return err
	}
	err = m.Wait(ctx)
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	return err
}

// Main is one devmsg service: `devmsg serve` runs one, and tests start
// whole servers with it. Set the exported fields, call Run, then Close.
type Main struct {
	Config Config
	Stdout io.Writer // the credentials shown once
	Stderr io.Writer // the log

	log         *slog.Logger
	httpLn      net.Listener            // bound by listen, served by serveHTTP
	mqttLns     map[string]net.Listener // bound by listen, served by the broker
	cert        *tls.Certificate        // nil when neither HTTP nor MQTT uses TLS
	store       store.Store             // fenced by the node in a cluster
	redis       *redis.Store            // nil on the embedded store
	pebble      *pebble.Store           // nil on Redis
	budget      *fdbudget.Budget        // the file descriptors of client connections
	fdListeners []*fdbudget.Listener    // the bound ports, under the budget
	node        *cluster.Node           // nil unless on Redis
	adminHash   [32]byte

	reg        *prometheus.Registry
	dispatcher *delivery.Dispatcher
	events     *events.Service
	mqttAPI    *mqttapi.API
	callbacks  *callback.Worker
	webhooks   *events.Webhooks
	trimmer    *events.Trimmer
	counted    *events.CountedStore // the store, counting the events appended
	broadcasts *message.Broadcaster
	commands   *command.Service
	cmdSender  *delivery.CommandSender
	jobs       *job.Service
	// stopCommands ends the command sweep.
	stopCommands context.CancelFunc
	api          *restapi.API
	broker       *broker.Broker
	console      *console.Console

	callbacksStarted bool // on a single node; in a cluster the node's lease runs them
	webhooksStarted  bool // likewise
	trimmerStarted   bool
	fanoutStarted    bool // likewise, the broadcasts' fan-out
	jobsStarted      bool // likewise, the jobs' runner
	brokerStarted    bool
	mqttAddrs        map[string]string
	httpServer       *http.Server
	httpAddr         string
	served           chan error // the result of httpServer.Serve
	httpDone         bool       // Wait saw the HTTP server end

	closeOnce sync.Once
	closeErr  error
}

// NewMain returns a Main with the default config, writing to the
// process's stdout and stderr.
func NewMain() *Main {
	return &Main{Config: defaultConfig(), Stdout: os.Stdout, Stderr: os.Stderr}
}

// HTTPAddr returns the bound address of the REST API and console, once
// Run has returned.
func (m *Main) HTTPAddr() string { return m.httpAddr }

// MQTTAddrs returns the bound MQTT listener addresses by id (tcp, tls,
// ws), once Run has returned.
func (m *Main) MQTTAddrs() map[string]string { return m.mqttAddrs }

// Run opens everything and starts serving; it returns once the service
// is ready. Whatever it opened, even when it fails, Close releases.
//
// The order is the contract of a start. Every port is bound, and the TLS
// certificate loaded, before anything is created, so a busy port or a bad
// certificate fails the first start before it generates (and prints) the
// credentials it shows only once. A cluster node joins, and fences its
// writes, before it writes anything.
func (m *Main) Run(ctx context.Context) error {
	m.log = newLogger(m.Config.Log, m.Stderr)
	steps := []func(context.Context) error{
		m.listen,
		m.loadCert,
		m.openStore,
		m.joinCluster,
		m.createCredentials,
		m.resetPresence,
		m.buildServices,
		m.startServices,
		m.serveHTTP,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// listen binds the HTTP and MQTT ports.
func (m *Main) listen(context.Context) error {
	cfg := m.Config
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	m.httpLn = ln
	m.mqttLns, err = broker.Listen(broker.Config{TCPAddr: cfg.MQTT.TCPAddr, TLSAddr: cfg.MQTT.TLSAddr, WSAddr: cfg.MQTT.WSAddr})
	if err != nil {
		return err
	}
	m.admitConnections()
	return nil
}

// loadCert makes the data_dir and loads (or on the first start, makes)
// the TLS certificate: one that cannot be loaded must fail the start
// before the credentials are made.
func (m *Main) loadCert(context.Context) error {
	if err := os.MkdirAll(m.Config.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data_dir: %w", err)
	}
	if !m.Config.HTTP.TLS.Enabled && m.Config.MQTT.TLSAddr == "" {
		return nil
	}
	c, err := loadOrCreateCert(m.Config.HTTP.TLS, m.Config.DataDir)
	if err != nil {
		return err
	}
	m.cert = &c
	return nil
}

func (m *Main) openStore(ctx context.Context) error {
	st, err := openStore(ctx, m.Config, m.log)
	if err != nil {
		return err
	}
	m.redis, _ = st.(*redis.Store)
	m.pebble, _ = st.(*pebble.Store)
	// Below everything that writes, cluster fencing included, so that
	// every event appended is counted.
	m.counted = events.Counted(st)
	m.store = m.counted
	return nil
}

// joinCluster makes this process, on Redis, a node of a cluster: the
// nodes sharing the Redis are one service.
func (m *Main) joinCluster(ctx context.Context) error {
	if m.redis == nil {
		return nil
	}
	rs := m.redis
	node, err := cluster.Join(ctx, cluster.Config{NodeID: m.Config.NodeID, Prefix: rs.Prefix(), Offline: presence.NodeLost}, rs.Client(), m.store, m.log)
	if err != nil {
		return err
	}
	m.node = node
	// Nothing this process writes may land once another holds its
	// node_id: Redis checks the claim where it can, and the node's local
	// lease everywhere.
	if !rs.SetFence(node.FenceKey(), node.Token()) {
		m.log.Info("on Redis Cluster, writes are fenced by the node's local lease only (see docs/operations.md)")
	}
	m.store = node.Fence(m.store)
	m.log.Info("joined the cluster", "node_id", m.Config.NodeID)
	return nil
}

// createCredentials makes, and prints once, the admin password and the
// default app the first start needs, and creates the configured apps.
func (m *Main) createCredentials(ctx context.Context) error {
	hash, err := adminPassword(ctx, m.Config.Admin, m.store, m.Stdout)
	if err != nil {
		return err
	}
	m.adminHash = hash
	return ensureApps(ctx, m.Config.Apps, m.store, m.Stdout, m.log)
}

// resetPresence marks offline the devices online at the last stop: no
// connection outlives the process, and a crash left no logouts behind. A
// cluster node resets only the devices it held itself.
func (m *Main) resetPresence(ctx context.Context) error {
	resetNode := store.AllNodes
	if m.node != nil {
		resetNode = m.node.ID()
	}
	n, err := m.store.ResetPresence(ctx, resetNode, math.MaxInt64, time.Now().Unix(), presence.NodeLost)
	if err != nil {
		return fmt.Errorf("reset presence: %w", err)
	}
	if n > 0 {
		m.log.Info("marked devices offline that were online at the last stop", "devices", n)
	}
	return nil
}

// buildServices constructs the domain services, the REST API, the MQTT
// broker and the console, and registers the metrics; nothing runs yet.
func (m *Main) buildServices(ctx context.Context) error {
	cfg, st, log := m.Config, m.store, m.log
	m.reg = prometheus.NewRegistry()
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m.counted.Collector())

	m.dispatcher = delivery.NewDispatcher(st, log)
	m.events = events.NewService(st)
	m.mqttAPI = mqttapi.New(st, m.dispatcher, shadow.NewSync(st, log), m.events, log)
	var limiter restapi.Limiter // nil: per process
	if m.node != nil {
		m.mqttAPI.SetPeers(m.node)
		limiter = cluster.NewRateLimiter(m.redis.Client(), m.redis.Prefix())
	}

	cb := cfg.Callback
	allowedNetworks, _ := netguard.ParseNetworks(cb.AllowedNetworks) // validated with the config
	// One app cache for the API and the callback worker: a settings
	// change made through the API applies to the next record.
	appCache := appcache.New(st, time.Now)
	callbacks, err := callback.New(callback.Config{
		BatchSize:      cb.BatchSize,
		FlushInterval:  time.Duration(cb.FlushInterval),
		RetryInterval:  time.Duration(cb.RetryInterval),
		MaxRetries:     cb.MaxRetries,
		RequestTimeout: time.Duration(cb.RequestTimeout),

		AllowedNetworks: allowedNetworks,
	}, st, appCache, log, m.reg)
	if err != nil {
		return err
	}
	m.callbacks = callbacks
	existing, err := st.ListApps(ctx)
	if err != nil {
		return fmt.Errorf("list apps: %w", err)
	}
	for _, a := range existing {
		callbacks.Track(a.Key)
	}
	m.webhooks, err = events.NewWebhooks(events.WebhookConfig{
		BatchSize:       cfg.Events.BatchSize,
		Linger:          time.Duration(cfg.Events.Linger),
		RequestTimeout:  time.Duration(cb.RequestTimeout),
		AllowedNetworks: allowedNetworks,
	}, st, appCache, log, m.reg)
	if err != nil {
		return err
	}
	// Every node trims the event logs, in a cluster too: trimming is
	// idempotent, and no lease is needed to keep the logs bounded.
	m.trimmer, err = events.NewTrimmer(cfg.Events.domain(), st, log, m.reg)
	if err != nil {
		return err
	}
	ids, err := message.NewIDs(ctx, cfg.NodeID, st)
	if err != nil {
		return err
	}
	messages := message.NewService(st, ids, m.mqttAPI)
	if m.commands, m.cmdSender, err = newCommands(ctx, st, ids, m.mqttAPI, m.node != nil, log); err != nil {
		return err
	}
	m.jobs = newJobs(st, ids, m.commands, messages, log)
	m.broadcasts = message.NewBroadcaster(messages, st, message.FanoutConfig{Rate: cfg.Broadcast.Rate, YieldRate: cfg.Broadcast.YieldRate, Chunk: cfg.Broadcast.Chunk}, log)
	m.api, err = restapi.New(restapi.Config{
		NodeID:              cfg.NodeID,
		DefaultRateLimit:    cfg.RateLimit.Default,
		AdminUsername:       cfg.Admin.Username,
		AdminPasswordSHA256: m.adminHash,
		Messages:            messages,
		Broadcasts:          m.broadcasts,
		Commands:            m.commands,
		Jobs:                m.jobs,
		Shadows:             shadow.NewService(st, ids, m.mqttAPI),
		AppService:          apps.NewService(apps.Config{DefaultRateLimit: cfg.RateLimit.Default}, st, appCache),
		DeviceService:       devices.NewService(st, m.mqttAPI),
		DeadLetters:         callback.NewDeadLetters(st, callbacks),
		Events:              m.events,
		RateLimiter:         limiter,

		CallbackAllowCustomPorts: cb.AllowCustomPorts,
		CallbackAllowedNetworks:  allowedNetworks,
		CallbackTimeout:          time.Duration(cb.RequestTimeout),
		Callbacks:                callbacks,
		EventWebhooks:            m.webhooks,
		Apps:                     appCache,

		MaxLongPollsPerApp: m.maxLongPolls(),
		LongPollRoom:       m.longPollRoom,
		Ready:              m.ready,
	}, st, log, m.reg)
	if err != nil {
		return err
	}

	m.broker = broker.New(m.brokerConfig(), m.mqttAPI, log)
	m.mqttAPI.SetBroker(m.broker)
	m.registerMetrics()
	// The console calls the API in-process; everything else is the API.
	// Built last: it samples the metrics registered above at once.
	m.console, err = console.New(console.Config{API: m.api.Handler(), Gatherer: m.reg, Logger: log})
	return err
}

// brokerConfig serves MQTT on the ports listen bound.
func (m *Main) brokerConfig() broker.Config {
	c := broker.Config{
		TCPAddr:       m.Config.MQTT.TCPAddr,
		TLSAddr:       m.Config.MQTT.TLSAddr,
		WSAddr:        m.Config.MQTT.WSAddr,
		Bound:         m.mqttLns,
		ServiceTopics: mqttapi.ServiceTopics,
		AnswerTopics:  mqttapi.AnswerTopics,
	}
	if m.cert != nil {
		c.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*m.cert}, MinVersion: tls.VersionTLS12}
	}
	return c
}

// startServices starts the message expiry, the callback delivery, the
// cluster's listening for other nodes and, last, MQTT: devices connect
// only once everything they reach is running.
func (m *Main) startServices(ctx context.Context) error {
	m.dispatcher.Start()
	cmdCtx, stop := context.WithCancel(context.Background())
	m.stopCommands = stop
	go m.commands.Run(cmdCtx)
	m.trimmer.Start()
	m.trimmerStarted = true
	// One node at a time delivers callbacks: the one holding the lease.
	// Stopped before the store closes (by node.Close in a cluster); what
	// is not delivered stays queued.
	if m.node == nil {
		if err := m.callbacks.Start(ctx); err != nil {
			return err
		}
		m.callbacksStarted = true
		m.webhooks.Start()
		m.webhooksStarted = true
		if err := m.broadcasts.Start(); err != nil {
			return err
		}
		m.fanoutStarted = true
	} else {
		m.node.Lead(broadcastLease, m.broadcasts.Start, m.broadcasts.Stop)
		m.node.Lead(callbackLease, func() error { return m.callbacks.Start(context.Background()) }, m.callbacks.Stop)
		// The event webhooks likewise, under a lease of their own: each
		// webhook's cursor is shared, its loop runs on one node.
		m.node.Lead(webhookLease, func() error { m.webhooks.Start(); return nil }, m.webhooks.Stop)
		// Listening for other nodes before any device can connect.
		m.node.Run(m.mqttAPI)
	}
	if err := m.startJobs(); err != nil {
		return err
	}
	addrs, err := m.broker.Start()
	if err != nil {
		return err
	}
	m.brokerStarted, m.mqttAddrs = true, addrs
	m.log.Info("mqtt listening", "addrs", addrs)
	return nil
}

// serveHTTP serves the REST API and the console on the bound HTTP port,
// in the background.
func (m *Main) serveHTTP(context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("/console", m.console)
	mux.Handle(console.Prefix, m.console)
	mux.Handle("/", m.api.Handler())
	// A browser pointed at the service finds the console.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, console.Prefix, http.StatusFound)
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
	}
	// The console's live event streams never finish by themselves: they
	// end as shutdown begins, so it waits only for real requests.
	srv.RegisterOnShutdown(func() { _ = m.console.Close() })
	tlsOn := m.Config.HTTP.TLS.Enabled
	ln := m.httpLn
	if tlsOn {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*m.cert}, MinVersion: tls.VersionTLS12}
		ln = newHTTPSOnlyListener(ln, srv.TLSConfig)
	}
	m.httpAddr = ln.Addr().String()
	m.log.Info("http listening", "addr", m.httpAddr, "tls", tlsOn)
	base := baseURL(m.httpAddr, tlsOn)
	m.log.Info("devmsg ready", "console", base+"console/", "api", base)

	m.httpServer, m.served = srv, make(chan error, 1)
	go func() { m.served <- srv.Serve(ln) }()
	return nil
}

// Wait blocks while the service runs. It returns nil once ctx is done,
// or the error that ended the service: the HTTP server failed, or another
// process took this node_id.
func (m *Main) Wait(ctx context.Context) error {
	var lost <-chan struct{} // never closed on a single node
	if m.node != nil {
		lost = m.node.Lost()
	}
	select {
	case err := <-m.served:
		m.httpDone = true
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
		return nil
	case <-lost:
		// Another process serves this node_id now. Refuse REST at once;
		// Close disconnects the devices and stops the rest.
		_ = m.httpServer.Close()
		m.httpDone = true
		return fmt.Errorf("node_id %d was taken by another process while this one was paused or cut off; stopping (a restart waits for the node_id again)", m.Config.NodeID)
	}
}

// Close stops what Run started, in reverse order: requests in flight
// finish; devices are disconnected (and marked offline) while the store
// is open and before a cluster node releases its claim; the store closes
// last. It reports the HTTP server's shutdown error; the others are
// logged. Calls after the first return the first's result.
func (m *Main) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.close() })
	return m.closeErr
}

func (m *Main) close() error {
	err := m.stopHTTP()
	if m.console != nil {
		_ = m.console.Close()
	}
	if m.brokerStarted {
		if err := m.broker.Close(); err != nil {
			m.log.Error("close mqtt broker", "err", err)
		}
	}
	if m.cmdSender != nil {
		// The devices are gone: the PUBACKs they sent are stored now,
		// not after their linger, when the store may be closed.
		m.cmdSender.Flush()
	}
	if m.callbacksStarted {
		m.callbacks.Stop()
	}
	if m.webhooksStarted {
		m.webhooks.Stop()
	}
	if m.fanoutStarted {
		m.broadcasts.Stop()
	}
	if m.jobsStarted {
		m.jobs.Runner().Stop()
	}
	if m.dispatcher != nil {
		m.dispatcher.Stop()
	}
	if m.stopCommands != nil {
		m.stopCommands()
	}
	if m.trimmerStarted {
		m.trimmer.Stop()
	}
	if m.node != nil {
		// After the broker has disconnected this node's devices; stops
		// the callbacks too, when this node delivers them.
		m.node.Close()
	}
	if m.store != nil {
		if err := m.store.Close(); err != nil {
			m.log.Error("close store", "err", err)
		}
	}
	m.closeListeners()
	return err
}

// stopHTTP lets the requests in flight finish, within shutdownBudget.
func (m *Main) stopHTTP() error {
	if m.httpServer == nil || m.httpDone {
		return nil
	}
	m.httpDone = true
	m.log.Info("shutting down: finishing requests in flight")
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := m.httpServer.Shutdown(ctx); err != nil {
		// Requests still running after the budget are cut off so the
		// process can exit; their clients see a closed connection.
		_ = m.httpServer.Close()
		return fmt.Errorf("shutdown after %s: %w", shutdownBudget, err)
	}
	if err := <-m.served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	m.log.Info("stopped")
	return nil
}

// closeListeners closes the ports Run bound but did not hand on (the
// served ones are closed already).
func (m *Main) closeListeners() {
	for _, ln := range m.mqttLns {
		_ = ln.Close()
	}
	if m.httpLn != nil {
		_ = m.httpLn.Close()
	}
}

// baseURL is the URL of the service at the bound HTTP address addr; a
// wildcard host (":8443", "0.0.0.0", "::") is reached as localhost.
func baseURL(addr string, tls bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/"
}

func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated already
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	switch cfg.Store.Type {
	case "embedded":
		st, err := pebble.Open(cfg.DataDir+"/store", pebble.WithLogger(log), pebble.WithMinFree(uint64(cfg.Store.MinFreeMB)<<20))
		if inUse := (*pebble.InUseError)(nil); errors.As(err, &inUse) {
			by := "another devmsg process"
			if inUse.PID > 0 {
				by = fmt.Sprintf("another devmsg process (pid %d)", inUse.PID)
			}
			return nil, fmt.Errorf("data_dir %s is in use by %s: stop it, or give this one another --data_dir", cfg.DataDir, by)
		}
		if err != nil {
			return nil, diskFullStart(cfg.DataDir, err)
		}
		return st, nil
	case "redis":
		r := cfg.Store.Redis
		return redis.Open(ctx, redis.Options{Addrs: r.Addrs, MasterName: r.MasterName, Password: r.Password, DB: r.DB})
	default:
		return nil, fmt.Errorf("config: store.type: %q is not a store type (embedded or redis)", cfg.Store.Type)
	}
}

// adminPassword returns the SHA-256 of the admin password: the configured
// one, or one generated on the first start, printed once and remembered
// only by its hash.
func adminPassword(ctx context.Context, c AdminConfig, st store.Store, stdout io.Writer) ([32]byte, error) {
	if c.Password != "" {
		return sha256.Sum256([]byte(c.Password)), nil
	}
	var sum [32]byte
	load := func() error {
		stored, err := st.GetMeta(ctx, metaAdminHash)
		if err != nil {
			return err
		}
		if len(stored) != len(sum) {
			return fmt.Errorf("load admin password: the stored hash (meta %s) is %d bytes, not %d; set admin.password", metaAdminHash, len(stored), len(sum))
		}
		copy(sum[:], stored)
		return nil
	}
	err := load()
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return sum, err
	}
	pw := secret.Alnum(20)
	hash := sha256.Sum256([]byte(pw))
	err = st.CreateMeta(ctx, metaAdminHash, hash[:])
	if errors.Is(err, store.ErrAlreadyExists) {
		// Another node of the cluster, starting at the same moment, won:
		// its password is the one, and it printed it.
		return sum, load()
	}
	if err != nil {
		return sum, fmt.Errorf("store admin password: %w", err)
	}
	sum = hash
	fmt.Fprintf(stdout, "admin account: username=%s password=%s\n  (shown once; set admin.password to choose your own)\n", c.Username, pw)
	return sum, nil
}

// ensureApps creates the configured apps that are missing, or with none
// configured and an empty store, one app whose credentials are printed once.
// An app that exists already is left as stored (the admin API may have
// changed it), with a warning when the config disagrees.
func ensureApps(ctx context.Context, configured []AppConfig, st store.Store, stdout io.Writer, log *slog.Logger) error {
	if len(configured) == 0 {
		existing, err := st.ListApps(ctx)
		if err != nil {
			return fmt.Errorf("list apps: %w", err)
		}
		if len(existing) > 0 {
			return nil
		}
		app := apps.New("default")
		// Nodes of a cluster starting together on an empty store agree on
		// one default app: the first to claim the key creates it.
		err = st.CreateMeta(ctx, metaDefaultApp, []byte(app.Key))
		if errors.Is(err, store.ErrAlreadyExists) {
			claimed, err := st.GetMeta(ctx, metaDefaultApp)
			if err != nil {
				return fmt.Errorf("read the default app's key: %w", err)
			}
			if defaultAppCreated(ctx, st, string(claimed)) {
				return nil
			}
			// The node that claimed it stopped before creating it.
			app.Key = string(claimed)
		} else if err != nil {
			return fmt.Errorf("claim the default app: %w", err)
		}
		if err := st.CreateApp(ctx, app); errors.Is(err, store.ErrAlreadyExists) {
			return nil // created meanwhile, and printed, by its claimer
		} else if err != nil {
			return fmt.Errorf("create default app: %w", err)
		}
		fmt.Fprintf(stdout, "app created: name=%s key=%s master_secret=%s\n  (shown once)\n", app.Name, app.Key, app.MasterSecret)
		return nil
	}
	for _, a := range configured {
		app := apps.New(a.Name)
		app.Key, app.MasterSecret = a.Key, a.MasterSecret
		err := st.CreateApp(ctx, app)
		if errors.Is(err, store.ErrAlreadyExists) {
			stored, gerr := st.GetApp(ctx, a.Key)
			if gerr != nil {
				return fmt.Errorf("load app %q: %w", a.Name, gerr)
			}
			if stored.Name != a.Name || !secret.Equal(stored.MasterSecret, a.MasterSecret) {
				// Never log the secrets themselves.
				log.Warn("configured app differs from the stored one; the stored name and master secret stay in effect",
					"app", a.Name, "key", a.Key)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("create app %q: %w", a.Name, err)
		}
	}
	return nil
}

// defaultAppCreated waits up to 5 s for the default app another node
// claimed to appear.
func defaultAppCreated(ctx context.Context, st store.Store, key string) bool {
	for range 50 {
		if _, err := st.GetApp(ctx, key); err == nil {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// registerDeviceMetrics exports the broker's and the dispatcher's counts.
func registerDeviceMetrics(reg *prometheus.Registry, mq *broker.Broker, d *delivery.Dispatcher) {
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	refused := func(reason string, f func(broker.PublishRefusals) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_mqtt_publishes_refused_total",
			Help:        "Device publishes refused (no PUBACK, or an MQTT 5 PUBACK with a reason code), by reason: quota (over the per-device publish rate, or answer rate for cmd/reply), malformed, topic (a topic the service takes nothing on), or error (not stored).",
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return float64(f(mq.PublishesRefused())) })
	}
	subRefused := func(reason string, f func(broker.SubscriptionRefusals) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "devmsg_mqtt_subscriptions_refused_total",
			Help:        "Topic filters refused (SUBACK 0x80, v5 0x87 or 0x97), by reason: topic (outside the device's own topics), limit (over the filters one connection may hold) or rate (over the subscribe rate).",
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return float64(f(mq.SubscriptionsRefused())) })
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "devmsg_mqtt_connected_devices", Help: "Devices connected over MQTT."},
			func() float64 { return float64(mq.Connected()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "devmsg_mqtt_subscribed_devices", Help: "Connected devices subscribed to their msg topic."},
			func() float64 { return float64(d.Stats().Routes) }),
		refused("quota", func(r broker.PublishRefusals) int64 { return r.RateLimit + r.Quota }),
		refused("malformed", func(r broker.PublishRefusals) int64 { return r.Malformed }),
		refused("topic", func(r broker.PublishRefusals) int64 { return r.Topic }),
		refused("error", func(r broker.PublishRefusals) int64 { return r.Failed }),
		subRefused("topic", func(r broker.SubscriptionRefusals) int64 { return r.Topic }),
		subRefused("limit", func(r broker.SubscriptionRefusals) int64 { return r.Limit }),
		subRefused("rate", func(r broker.SubscriptionRefusals) int64 { return r.Rate }),
		counter("devmsg_mqtt_logins_throttled_total", "Device logins refused unchecked after too many failed ones.", mq.LoginsThrottled),
		counter("devmsg_messages_published_total", "Messages written to devices, redeliveries included.", func() int64 { return d.Stats().Published }),
		counter("devmsg_messages_delivered_total", "Messages acknowledged by their device (record 4).", func() int64 { return d.Stats().Delivered }),
		counter("devmsg_messages_expired_total", "Messages whose ttl ran out before delivery (record 5, 3005).", func() int64 { return d.Stats().Expired }),
	)
}
