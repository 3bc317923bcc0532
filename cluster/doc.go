// Package cluster lets several devmsg nodes sharing one Redis work as one
// service. Redis holds everything durable (package store/redis); this
// package adds what the nodes tell one another:
//
//   - Membership. Each node holds a heartbeat key with a short TTL under
//     its node_id. A node whose heartbeat lapses is dead: the others mark
//     the devices it held offline (store.ResetPresence for its node_id).
//   - Fencing. Two live processes must never act as one node_id (they
//     would hand out the same msgids). A node knows its claim valid only
//     until its last renewal was sent plus the TTL, less a margin, on the
//     monotonic clock, and its store refuses all work past that (Fence);
//     where Redis allows it, every write also checks inside Redis that
//     this process is still the node_id's last claimant. A node that finds
//     another process holding its node_id reports it on Lost and stops.
//   - Events. Each node subscribes to a pub/sub channel of its own; a node
//     that changed something a device on another node must see (a queued
//     message, a desired property, a takeover, a disable) publishes an
//     Event there. Events only wake: the store is the record, so a lost
//     event delays and never loses (see Handler.Resync).
//   - Leases. Work that one node at a time must do (the callback worker)
//     runs on the node holding a lease key.
//   - Rate limits shared by every node (RateLimiter).
//
// Every key lives under one hash tag, so the few scripts that touch two
// keys work on Redis Cluster too.
package cluster
