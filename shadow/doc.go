// Package shadow owns device properties: the desired values an app sets,
// the values a device reports, and the per-app property model both are
// checked against.
package shadow
