// Package shadow owns device properties: the desired values an app sets,
// the values a device reports, and the per-app property model both are
// checked against. Service holds the rules of what an app does to them
// (set desired values, read the summary); Sync those of connected devices
// (desired pushes and reports).
package shadow
