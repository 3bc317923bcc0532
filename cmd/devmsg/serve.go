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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/devmsg/devmsg/application"
	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/cluster"
	"github.com/devmsg/devmsg/console"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/gateway"
	"github.com/devmsg/devmsg/internal/appcache"
	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
	"github.com/devmsg/devmsg/store/redis"
)

const (
	// callbackLease is the cluster lease of the callback worker.
	callbackLease  = "callbacks"
	metaAdminHash  = "admin_password_sha256"
	metaDefaultApp = "default_app_key"
	shutdownBudget = 30 * time.Second
)

// runServe is `devmsg serve`.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, os.Environ())
	if errors.Is(err, flag.ErrHelp) {
		writeServeUsage(stderr)
		return nil
	}
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	// Every port is bound, and the TLS certificate loaded, before anything
	// is created, so a busy port or a bad certificate fails the first start
	// before it generates (and prints) the credentials it shows only once. Whatever the rest of the start does not hand on is
	// closed on the way out.
	httpLn, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	defer httpLn.Close()
	mqttLns, err := broker.Listen(broker.Config{TCPAddr: cfg.MQTT.TCPAddr, TLSAddr: cfg.MQTT.TLSAddr, WSAddr: cfg.MQTT.WSAddr})
	if err != nil {
		return err
	}
	defer func() {
		for _, ln := range mqttLns {
			_ = ln.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data_dir: %w", err)
	}
	// The certificate too: one that cannot be loaded must fail the start
	// before the credentials are made.
	var cert *tls.Certificate
	if cfg.HTTP.TLS.Enabled || cfg.MQTT.TLSAddr != "" {
		c, err := loadOrCreateCert(cfg.HTTP.TLS, cfg.DataDir)
		if err != nil {
			return err
		}
		cert = &c
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("close store", "err", err)
		}
	}()
	// On Redis, this process is a node of a cluster: the nodes sharing the
	// Redis are one service.
	var node *cluster.Node
	rs, _ := st.(*redis.Store)
	if rs != nil {
		node, err = cluster.Join(ctx, cluster.Config{NodeID: cfg.NodeID, Prefix: rs.Prefix()}, rs.Client(), st, log)
		if err != nil {
			return err
		}
		// Closed after the broker (deferred later, so run earlier) has
		// disconnected this node's devices.
		defer node.Close()
		// Nothing this process writes may land once another holds its
		// node_id: Redis checks the claim where it can, and the node's
		// local lease everywhere.
		if !rs.SetFence(node.FenceKey(), node.Token()) {
			log.Info("on Redis Cluster, writes are fenced by the node's local lease only (see docs/operations.md)")
		}
		st = node.Fence(st)
		log.Info("joined the cluster", "node_id", cfg.NodeID)
	}
	adminHash, err := adminPassword(ctx, cfg.Admin, st, stdout)
	if err != nil {
		return err
	}
	if err := ensureApps(ctx, cfg.Apps, st, stdout, log); err != nil {
		return err
	}
	// No connection outlives the process; a crash left no logouts behind.
	// A cluster node resets only the devices it held itself.
	resetNode := store.AllNodes
	if node != nil {
		resetNode = node.ID()
	}
	if n, err := st.ResetPresence(ctx, resetNode, math.MaxInt64, time.Now().Unix()); err != nil {
		return fmt.Errorf("reset presence: %w", err)
	} else if n > 0 {
		log.Info("marked devices offline that were online at the last stop", "devices", n)
	}

	dispatcher := message.NewDispatcher(st, log)
	dispatcher.Start()
	defer dispatcher.Stop()
	gw := gateway.New(st, dispatcher, shadow.NewSync(st, log), log)
	var limiter restapi.Limiter // nil: per process
	if node != nil {
		gw.SetPeers(node)
		limiter = cluster.NewRateLimiter(rs.Client(), rs.Prefix())
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cb := cfg.Callback
	allowedNetworks, _ := netguard.ParseNetworks(cb.AllowedNetworks) // validated with the config
	// One app cache for the API and the callback worker: a settings
	// change made through the API applies to the next record.
	apps := appcache.New(st, time.Now)
	callbacks, err := callback.New(callback.Config{
		BatchSize:      cb.BatchSize,
		FlushInterval:  time.Duration(cb.FlushInterval),
		RetryInterval:  time.Duration(cb.RetryInterval),
		MaxRetries:     cb.MaxRetries,
		RequestTimeout: time.Duration(cb.RequestTimeout),

		AllowedNetworks: allowedNetworks,
	}, st, apps, log, reg)
	if err != nil {
		return err
	}
	// One node at a time delivers callbacks: the one holding the lease.
	// Stopped before the store closes (by node.Close in a cluster); what
	// is not delivered stays queued.
	if node == nil {
		if err := callbacks.Start(ctx); err != nil {
			return err
		}
		defer callbacks.Stop()
	} else {
		node.Lead(callbackLease, func() error { return callbacks.Start(context.Background()) }, callbacks.Stop)
	}
	ids, err := message.NewIDs(ctx, cfg.NodeID, st)
	if err != nil {
		return err
	}
	api, err := restapi.New(restapi.Config{
		NodeID:              cfg.NodeID,
		DefaultRateLimit:    cfg.RateLimit.Default,
		AdminUsername:       cfg.Admin.Username,
		AdminPasswordSHA256: adminHash,
		Messages:            message.NewService(st, ids, gw),
		Shadows:             shadow.NewService(st, ids, gw),
		AppService:          application.NewService(application.Config{DefaultRateLimit: cfg.RateLimit.Default}, st, apps),
		DeviceService:       devices.NewService(st, gw),
		DeadLetters:         callback.NewDeadLetters(st, callbacks),
		RateLimiter:         limiter,
		Devices:             gw,

		CallbackAllowCustomPorts: cb.AllowCustomPorts,
		CallbackAllowedNetworks:  allowedNetworks,
		CallbackTimeout:          time.Duration(cb.RequestTimeout),
		Callbacks:                callbacks,
		Apps:                     apps,
	}, st, log, reg)
	if err != nil {
		return err
	}
	brokerCfg := broker.Config{
		TCPAddr:       cfg.MQTT.TCPAddr,
		TLSAddr:       cfg.MQTT.TLSAddr,
		WSAddr:        cfg.MQTT.WSAddr,
		Bound:         mqttLns,
		ServiceTopics: gateway.ServiceTopics,
	}
	if cert != nil {
		brokerCfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	mq := broker.New(brokerCfg, gw, log)
	gw.SetBroker(mq)
	if node != nil {
		// Listening for other nodes before any device can connect.
		node.Run(gw)
	}
	mqttAddrs, err := mq.Start()
	if err != nil {
		return err
	}
	// Deferred before the HTTP server exists, so it runs after it stops:
	// devices are disconnected (and marked offline) while the store is open.
	defer func() {
		if err := mq.Close(); err != nil {
			log.Error("close mqtt broker", "err", err)
		}
	}()
	if node != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devmsg_cluster_callback_worker",
			Help: "1 while this node holds the callback lease and delivers the cluster's callbacks, else 0.",
		}, func() float64 {
			if node.Leading(callbackLease) {
				return 1
			}
			return 0
		}))
	}
	registerDeviceMetrics(reg, mq, dispatcher)
	log.Info("mqtt listening", "addrs", mqttAddrs)
	if testHookMQTT != nil {
		testHookMQTT(mqttAddrs)
	}
	// The console calls the API in-process; everything else is the API.
	con, err := console.New(console.Config{API: api.Handler(), Gatherer: reg, Logger: log})
	if err != nil {
		return err
	}
	defer con.Close()
	mux := http.NewServeMux()
	mux.Handle("/console", con)
	mux.Handle(console.Prefix, con)
	mux.Handle("/", api.Handler())
	// A browser pointed at the service finds the console.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, console.Prefix, http.StatusFound)
	})
	var handler http.Handler = mux
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln := httpLn
	if cfg.HTTP.TLS.Enabled {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
		ln = newHTTPSOnlyListener(ln, srv.TLSConfig)
	}
	log.Info("http listening", "addr", ln.Addr().String(), "tls", cfg.HTTP.TLS.Enabled)
	base := baseURL(ln.Addr().String(), cfg.HTTP.TLS.Enabled)
	log.Info("devmsg ready", "console", base+"console/", "api", base)
	if testHookListening != nil {
		testHookListening(ln.Addr().String())
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var lost <-chan struct{} // never closed on a single node
	if node != nil {
		lost = node.Lost()
	}
	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	case <-lost:
		// Another process serves this node_id now. Refuse REST at once;
		// the deferred steps disconnect the devices and stop the rest.
		_ = srv.Close()
		return fmt.Errorf("node_id %d was taken by another process while this one was paused or cut off; stopping (a restart waits for the node_id again)", cfg.NodeID)
	}
	log.Info("shutting down: finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running after the budget are cut off so the
		// process can exit; their clients see a closed connection.
		_ = srv.Close()
		return fmt.Errorf("shutdown after %s: %w", shutdownBudget, err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("stopped")
	return nil
}

// testHookListening, when set by a test, learns the HTTP address;
// testHookMQTT learns the MQTT listener addresses by id (tcp, tls, ws).
var (
	testHookListening func(addr string)
	testHookMQTT      func(addrs map[string]string)
)

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
		return pebble.Open(cfg.DataDir + "/store")
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
func ensureApps(ctx context.Context, apps []AppConfig, st store.Store, stdout io.Writer, log *slog.Logger) error {
	if len(apps) == 0 {
		existing, err := st.ListApps(ctx)
		if err != nil {
			return fmt.Errorf("list apps: %w", err)
		}
		if len(existing) > 0 {
			return nil
		}
		app := application.New("default")
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
	for _, a := range apps {
		app := application.New(a.Name)
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
func registerDeviceMetrics(reg *prometheus.Registry, mq *broker.Broker, d *message.Dispatcher) {
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "devmsg_mqtt_connected_devices", Help: "Devices connected over MQTT."},
			func() float64 { return float64(mq.Connected()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "devmsg_mqtt_subscribed_devices", Help: "Connected devices subscribed to their msg topic."},
			func() float64 { return float64(d.Stats().Routes) }),
		counter("devmsg_mqtt_publishes_dropped_total", "Device publishes dropped over the per-device rate limit.", mq.Dropped),
		counter("devmsg_mqtt_subscriptions_refused_total", "Topic filters refused over the per-connection subscription limits.", mq.SubscriptionsRefused),
		counter("devmsg_mqtt_logins_throttled_total", "Device logins refused unchecked after too many failed ones.", mq.LoginsThrottled),
		counter("devmsg_messages_published_total", "Messages written to devices, redeliveries included.", func() int64 { return d.Stats().Published }),
		counter("devmsg_messages_delivered_total", "Messages acknowledged by their device (record 4).", func() int64 { return d.Stats().Delivered }),
		counter("devmsg_messages_expired_total", "Messages whose ttl ran out before delivery (record 5, 3005).", func() int64 { return d.Stats().Expired }),
	)
}
