// Package bench is `devmsg bench`: it starts a devmsg server (or uses a
// running one), sets up an app and its devices through the real admin and
// REST APIs, drives message sends and property sets over keep-alive HTTPS
// connections and reports throughput and latency percentiles in a form
// that goes into BENCHMARKS.md.
//
// Two kinds of workload answer two questions. A closed loop (send,
// property) keeps a fixed number of connections busy back to back and
// measures the most the server can do. An open loop (send-latency,
// property-latency) issues requests on a fixed timetable below that
// maximum and times each one from its scheduled instant, so a stalled
// server cannot hide its stalls by slowing the load down (no coordinated
// omission); its percentiles are the ones a user at that rate sees.
package bench
