// Package bench is `devmsg bench`: it starts a devmsg server (or uses a
// running one), sets up an app and its devices through the real admin and
// REST APIs, drives message sends and property sets over keep-alive HTTPS
// connections, device telemetry over MQTT to an event webhook of its own
// (EventWorkloads), and device commands answered by MQTT 5 devices of its
// own (CommandWorkloads), and reports throughput and latency percentiles
// in a form that goes into BENCHMARKS.md.
//
// Two kinds of workload answer two questions. A closed loop (send,
// property) keeps a fixed number of connections busy back to back and
// measures the most the server can do. An open loop (send-latency,
// property-latency) issues requests on a fixed timetable below that
// maximum and times each one from its scheduled instant, so a stalled
// server cannot hide its stalls by slowing the load down (no coordinated
// omission); its percentiles are the ones a user at that rate sees.
//
// The servers it starts use the embedded Pebble store by default. With
// Options.Store "redis" the bench first starts its own redis-server (from
// PATH, on a loopback port, in a temporary dir, persisting through the
// append-only file only, with appendfsync Options.RedisFsync) and reports
// that process's CPU beside the servers', so a reader sees which of the
// two ran out. With Options.Nodes above 1 it starts that many servers on
// the one Redis, node IDs 1 up: setup goes through node 1, REST workers
// and MQTT devices spread round-robin over the nodes, the delivery
// workloads send to each device through a node other than the one it is
// connected to (their load reads "cross-node"), and the server CPU is the
// nodes' sum. Every process the bench starts is stopped at the end, also
// on an error or a signal.
//
// The package is large (over 2,000 lines) because it is a whole harness
// of its own, one file per concern: it starts servers, a redis-server and
// a Mosquitto to compare against, runs MQTT devices on a small client of
// its own, an HTTP callback receiver and an event webhook receiver, and
// the REST workloads, and reads the processes' CPU. None of these parts
// has a second user, and it
// imports nothing of devmsg's server, so it measures only what a user
// could; splitting it would add exported names and no clarity.
package bench
