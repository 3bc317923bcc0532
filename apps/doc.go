// Package apps owns apps, the tenants of devmsg: making a new one
// with its generated credentials, and the rules an app's creation
// follows. cmd/devmsg uses it for the apps of the configuration, restapi
// for the admin API's app creation.
package apps
