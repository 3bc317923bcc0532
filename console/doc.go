// Package console is devmsg's web console, served under /console/: the
// pages an operator (the admin account) and an app owner (an app key and
// its master secret) use by hand.
//
// The console holds no state of its own besides sessions. Every action is
// a call to the REST and admin API (Config.API), made in-process with the
// signed-in user's Basic credentials; the API's error message is what the
// user sees. So everything the console does is scriptable, and every rule
// is enforced in one place. Pages are html/template with go:embed, one
// small stylesheet, and a few lines of JavaScript that only enhance: every
// page works without it (the live event view then lists events page by
// page instead of streaming them). The bodies it sends and reads are the
// API's own types, declared once in package apitypes; the console and
// restapi never import each other.
//
// The package is large (over 2,000 lines, 200 of them this comment)
// because it is a whole web application: one file per page set (apps,
// devices, messages, events, webhooks, callbacks, metrics), plus sessions
// and sign-in protection. The pages share the session, the in-process API client and
// the templates; splitting them into packages would export those and
// gain nothing.
//
// # Sessions and protection
//
// Signing in checks the credentials with the API (admin: GET
// /admin/v1/apps; app owner: GET /admin/v1/apps/{key}) and opens a
// server-side session: the cookie devmsg_console holds a random 32-byte id
// (HttpOnly, SameSite=Strict, Secure over TLS, Path=/console/); the
// credentials stay in memory. A session ends after SessionIdle without a
// request, or on sign-out. Every POST form carries a hidden csrf input
// checked in constant time (403 on mismatch); the sign-in forms, used
// before there is a session, check it against the devmsg_console_login
// cookie. Each failed sign-in waits FailureDelay; LockoutFailures failures
// for one (client IP, user name or app key) within LockoutWindow lock that
// pair out for LockoutWindow. An app owner's session reaches only its own
// app: any other {key} is a 404 page.
//
// # Routes
//
// GET pages render; POST actions act, then redirect (303) back with a
// flash message shown once (Post/Redirect/Get). Secrets shown once
// (revealed or rotated master secret, a new app's secret, new devices'
// secrets) travel in that flash and are never rendered again.
//
//	GET  /console                     301 to /console/
//	GET  /console/                    overview
//	GET  /console/login               sign-in forms
//	POST /console/login               mode=admin (username, password) or mode=app (app_key, master_secret)
//	POST /console/logout
//	GET  /console/static/{file}       console.css, console.js
//	GET  /console/apps                admin: app list and create form (an app owner is sent to their app)
//	POST /console/apps                admin: create (name)
//	GET  /console/apps/{key}          key, master secret controls, rate limits, property model
//	POST /console/apps/{key}/secret/reveal           confirm=1
//	POST /console/apps/{key}/secret/rotate           confirm=<app key>
//	POST /console/apps/{key}/ratelimits              create, property, message, query ("" unchanged)
//	POST /console/apps/{key}/properties/add          name, type, min, max, max_length
//	POST /console/apps/{key}/properties/update       orig, name, type, min, max, max_length
//	POST /console/apps/{key}/properties/remove       name
//	GET  /console/apps/{key}/devices?prefix=&cursor= device list, 50 a page
//	POST /console/apps/{key}/devices                 batch create: list (textarea) and/or file (CSV), multipart
//	GET  /console/apps/{key}/devices/{name}          device page
//	POST /console/apps/{key}/devices/{name}/property name, value, as_string, version
//	POST /console/apps/{key}/devices/{name}/flag     flag=0|1
//	POST /console/apps/{key}/devices/{name}/delete   confirm=1
//	POST /console/apps/{key}/devices/{name}/message  msg_body, ttl
//	POST /console/apps/{key}/devices/{name}/command  name, params (JSON), timeout, ttl, wait (0..60)
//	GET  /console/apps/{key}/messages?cursor=        recent messages, newest first, 50 a page
//	GET  /console/apps/{key}/messages?msgid=N        trace
//	POST /console/apps/{key}/messages/retract        msgid
//	GET  /console/apps/{key}/events?type=&device=    live event view (type repeated; device one name)
//	GET  /console/apps/{key}/events?after=N&...      the same, listing the events after N (no JavaScript)
//	GET  /console/apps/{key}/events/stream?after=N&type=&device=
//	                                                 Server-Sent Events: one table row per event;
//	                                                 Last-Event-ID overrides after
//	GET  /console/apps/{key}/webhooks                event webhooks and the add form
//	POST /console/apps/{key}/webhooks/add            url, types (repeated; none: all), format ("" or jiot)
//	POST /console/apps/{key}/webhooks/delete         url
//	GET  /console/apps/{key}/callbacks?cursor=       settings, URLs, deliveries, dead letters
//	POST /console/apps/{key}/callbacks/switch        enabled=1|0
//	POST /console/apps/{key}/callbacks/types         types (repeated, 0..8)
//	POST /console/apps/{key}/callbacks/urls/add      url
//	POST /console/apps/{key}/callbacks/urls/test     url
//	POST /console/apps/{key}/callbacks/urls/default  url
//	POST /console/apps/{key}/callbacks/urls/delete   url
//	POST /console/apps/{key}/callbacks/deadletters/{id}/redeliver
//
// # The live event view
//
// The events page finds the app's newest event (the "newest" of one
// pull's answer: see newestEvent) and the script opens an
// EventSource on the stream from there. The stream long-polls GET
// /event/v1/events in-process with the app's credentials and the page's
// filters, and sends each event as a table row rendered by html/template
// (so device data is escaped in one place, the page's own), with the
// event id as the SSE id: a browser that reconnects sends Last-Event-ID
// and the stream goes on after it. An empty pull sends a comment, and
// the id past what the filtered read examined. The stream ends when the
// browser goes away (the request's context ends the pull), when the
// session ends, and when the console closes; it moves the connection's
// write deadline on before each write, past the server's WriteTimeout. A
// stream more than streamCatchUp events behind skips to the newest event
// (SSE event devmsg-skip, shown as a notice row). Each row is one line
// (eventrow.go): telemetry as its topic and decoded payload, other events
// as compact JSON, the whole event in a <details> below it.
//
// # Charts
//
// Charts are inline SVG written by chart.go (Chart: lines over equally
// spaced points; Spark: a sparkline), coloured by console.css classes,
// so they need no script and pass the page's Content-Security-Policy; a
// new page draws one by putting a Chart or Spark in its data and
// {{.SVG}} in its template. Their data: the overview's from the sampler
// (metrics.go: an hour of per-minute snapshots of the registry), a
// device's sparklines from its recent events (devicetrends.go), a
// broadcast's delivery from the counts its page read (broadcastchart.go).
//
// # Element ids for browser tests
//
// These ids and attributes are stable; tests may rely on them. {i} is the
// row's index from 0, {t} a record type 0 to 8, {cat} a rate-limit
// category (create, property, message, query), {id} a dead letter's id.
//
// Every page:
//
//	nav-overview, nav-apps (admin), whoami, logout (form), logout-submit
//	nav-app, nav-devices, nav-messages, nav-events, nav-webhooks, nav-callbacks   on an app's pages
//	flash, flash-message     the outcome of the last POST (class flash-ok or flash-error)
//	secret-value             a revealed or rotated master secret (in the flash)
//	error-page, error-message   403/404/... pages
//
// Sign-in (/console/login):
//
//	login-admin (form), login-admin-username, login-admin-password, login-admin-submit
//	login-app (form), login-app-key, login-app-secret, login-app-submit
//	login-error, login-notice
//
// Overview (/console/):
//
//	overview-connected, overview-sent, overview-delivered, overview-failed,
//	overview-window ("last hour" or "since start"), overview-backlog
//	overview-apps (table; rows tr[data-app=KEY], cell .app-backlog), overview-app-count
//	overview-app (an app owner's section), overview-no-metrics
//
// Apps (/console/apps):
//
//	app-create (form), app-create-name, app-create-submit
//	app-created, app-created-key, app-created-secret, app-created-link   after creating
//	apps-table (rows tr[data-app=KEY], links a.app-link)
//
// App (/console/apps/{key}):
//
//	app-name, app-key, app-created-at
//	secret-reveal (form), secret-reveal-confirm, secret-reveal-submit
//	secret-rotate (form), secret-rotate-confirm, secret-rotate-submit
//	ratelimits (form), ratelimit-{cat}, ratelimits-submit (admin only)
//	properties-table (rows tr[data-property=NAME]):
//	  property-{i}-name, property-{i}-type, property-{i}-min, property-{i}-max,
//	  property-{i}-max-length, property-{i}-save (form property-edit-{i}),
//	  property-{i}-remove (form property-remove-{i})
//	property-add (form), property-add-name, property-add-type, property-add-min,
//	property-add-max, property-add-max-length, property-add-submit
//
// Devices (/console/apps/{key}/devices):
//
//	devices-search (form), devices-search-prefix, devices-search-submit
//	devices-table (rows tr[data-device=NAME]; a.device-link, .device-status, .device-flag, .device-mark)
//	devices-next, devices-first, devices-empty
//	devices-create (form), devices-create-list, devices-create-file, devices-create-submit
//	devices-create-result, devices-create-summary, devices-create-created, devices-create-failed
//	devices-create-results (rows tr[data-device=NAME][data-code=N]; cells .result-line,
//	  .result-name, .result-code, .result-message, .result-secret)
//
// Device (/console/apps/{key}/devices/{name}):
//
//	device-name, device-status ("online"/"offline"), device-flag ("enabled"/"disabled"),
//	device-mark, device-client-ip, device-last-login, device-last-logout,
//	device-time-create, device-time-active, device-sdk-ver, device-app-ver,
//	device-desired-version, device-reported-version, device-tags (each tag a span.tag; "—" for none)
//	device-tags-form (form), device-tags-input (tags separated by spaces or commas), device-tags-submit
//	device-properties (rows tr[data-property=NAME]; cells .prop-desired,
//	  .prop-desired-time, .prop-reported, .prop-reported-time; values as JSON)
//	device-property-set (form), device-property-name, device-property-value,
//	device-property-as-string, device-property-submit
//	  a long value (over 64 bytes) folded: details.fold, its start in summary code,
//	  the whole value in code.fold-full
//	device-message (form), device-message-body (data-max-bytes: the limit in UTF-8
//	  bytes), device-message-bytes (the script's byte count), device-message-ttl,
//	  device-message-submit
//	device-message-msgid, device-message-trace (link)   in the flash after sending
//	device-command (form), device-command-name, device-command-params, device-command-timeout,
//	  device-command-ttl, device-command-wait, device-command-submit
//	device-commands (rows tr[data-cmd-id=N], newest first; cells .cmd-id, .cmd-name,
//	  .cmd-state, .cmd-progress, .cmd-code, .cmd-result (JSON), .cmd-message,
//	  .cmd-time-create, .cmd-time-done), inside device-commands-live (data-live="1"
//	  while a listed command has not ended), device-commands-empty,
//	  device-command-events-link
//	device-flag-form, device-disable or device-enable
//	device-delete (form), device-delete-confirm, device-delete-submit
//
// Broadcast (/console/apps/{key}/broadcast, ?id=N for one broadcast's progress):
//
//	broadcast-form (form), broadcast-target-tag, broadcast-tag, broadcast-target-all,
//	  broadcast-body, broadcast-ttl, broadcast-submit
//	broadcast-progress (data-live="2" while it runs: console.js refreshes it in place),
//	  broadcast-id, broadcast-state, broadcast-queued, broadcast-delivered, broadcast-failed,
//	  broadcast-expired, broadcast-retracted, and the bars broadcast-bar-queued,
//	  broadcast-bar-delivered, broadcast-bar-failed (progress elements)
//	broadcast-cancel (form), broadcast-cancel-submit, broadcast-error
//
// Messages (/console/apps/{key}/messages):
//
//	messages-table (rows tr[data-msgid=N]; cells .msg-id with a.msg-link to the trace,
//	  .msg-device, .msg-state, .msg-time, .msg-records), messages-next, messages-first,
//	  messages-empty   without msgid
//	messages-all   the link back to the list, with msgid
//	trace-lookup (form), trace-msgid, trace-submit, trace-error
//	trace, trace-state, trace-device, trace-ttl, trace-time-create
//	trace-records (rows tr[data-type=N]; cells .record-type "N name", .record-time, .record-error)
//	trace-retract (form, while pending), trace-retract-submit
//
// Events (/console/apps/{key}/events):
//
//	events-filter (form; checkboxes events-type-{i} name=type value=TYPE in the order of
//	  events.Types), events-device, events-filter-submit, events-filter-clear
//	events-device-name   the device of a per-device view, in the heading
//	events-status (the stream's state), events-newer (link), events-error
//	events-table (data-stream: the stream's URL; data-live="1" while the stream is open),
//	  events-rows (rows tr.event[data-id=ID][data-type=TYPE][data-device=NAME], newest first;
//	  cells .event-time (.event-id), .event-type, .event-device, .event-data: the data as
//	  indented JSON in a pre, folded (details.fold, pre.fold-full) when long), events-empty,
//	  tr.event-skip   a notice that the stream skipped ahead
//	device-events-link   on the device page
//
// Event webhooks (/console/apps/{key}/webhooks):
//
//	webhooks-table (rows tr[data-url=URL]; cells .webhook-url, .webhook-types,
//	  .webhook-format, .webhook-created; button webhook-{i}-delete, class .webhook-delete),
//	  webhooks-empty, webhooks-signing-secret
//	webhook-add (form), webhook-add-url, webhook-add-type-{i}, webhook-add-format, webhook-add-submit
//
// Callbacks (/console/apps/{key}/callbacks):
//
//	callback-switch (form), callback-state ("on"/"off"), callback-switch-submit
//	callback-types (form), callback-type-{t}, callback-types-submit, callback-signing-secret
//	callback-urls (rows tr[data-url=URL]; span.url-default on the default;
//	  buttons callback-url-{i}-test, callback-url-{i}-default, callback-url-{i}-delete,
//	  also classes .url-test, .url-make-default, .url-delete)
//	callback-url-add (form), callback-url-add-url, callback-url-add-submit
//	callback-url-test (form), callback-url-test-url, callback-url-test-submit
//	callback-deliveries (cells .delivery-status, .delivery-error)
//	callback-deadletters (rows tr[data-id=ID]; form deadletter-{id}-redeliver,
//	  button .deadletter-redeliver), deadletters-next, deadletters-first
package console
