// Package command holds device commands: a backend asks a device to do
// something and gets its answer (docs/api.md, "Device commands"). It
// accepts commands, keeps their states on the server's clock (ttl,
// answer timeout), takes the device's PUBACK, progress reports and
// answers, cancels, and wakes the calls that wait for a command to end.
// It knows no transport: it tells a Router it declares that a device
// has a command, and a Waker that a command ended.
package command
