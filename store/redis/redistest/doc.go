// Package redistest starts a real redis-server for tests: the store/redis
// and cluster tests and the whole-program cluster tests run against it,
// and restart, pause or reload it to see what devmsg does when Redis goes
// away. devmsg's Redis code is never tested against a fake. Tests skip
// with NotInstalled only when redis-server is not on the PATH.
package redistest
