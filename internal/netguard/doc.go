// Package netguard keeps the HTTP requests devmsg makes to URLs its
// tenants choose (callback URLs, event webhooks) off the service's own
// networks: loopback, link-local (cloud metadata at 169.254.169.254),
// private, shared, unique-local, unspecified, multicast and reserved
// addresses, and IPv4 addresses written in IPv6 forms (mapped, NAT64,
// 6to4). The check runs when a connection is made, on the address actually
// dialled after DNS, so a hostname, a DNS change or a redirect cannot get
// around it; an address it refuses is answered 400/1003 "URL not allowed"
// (docs/callbacks.md, "Configure", the address guard). The operator
// exempts networks with callback.allowed_networks.
package netguard
