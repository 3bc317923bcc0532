// Command devmsg is the device messaging service: `devmsg serve` runs it,
// `devmsg sim` simulates devices, `devmsg bench` measures it, `devmsg
// version` prints the build.
//
// It is the one package that knows every concrete type: Main (serve.go)
// binds the ports, opens the store, joins the cluster on Redis, builds the
// services and hands them to the REST API, the console and the broker,
// then stops them in the reverse order. It is over 1,500 lines with its
// tests' helpers counted out because the config (config.go, every key of
// docs/configuration.md with its validation), the simulator (sim.go) and
// that wiring are all command-line concerns that no other package should
// hold.
package main
