// Package redis is devmsg's shared store: store.Store on Redis through a
// go-redis UniversalClient, so one Redis, a Sentinel group or a Redis
// Cluster can serve several devmsg nodes. The Store keeps no state of its
// own beyond the client; every node sees every write at once. It needs
// Redis 6.2 or later (SET ... PXAT) and maxmemory-policy noeviction,
// which Open checks where CONFIG GET is allowed.
//
// # Keys
//
// Every key starts with Options.Prefix (P, default "devmsg:"). All of an
// app's keys share the hash tag {P a:<app key>}, so they land on one
// Cluster slot and one script or transaction may touch any of them. The
// app key is escaped (% { } as %25 %7B %7D) so that it cannot close the
// tag early; the part after the tag is fixed words and at most one
// trailing name, so keys of different apps or devices never meet.
//
//	{P a:<app>}:app            App JSON
//	{P a:<app>}:devs           sorted set of device names (all score 0: name order)
//	{P a:<app>}:d:<name>       Device JSON
//	{P a:<app>}:s:<name>       shadow hash (see shadow.go)
//	{P a:<app>}:q:<name>       pending queue: sorted set of message ids, score 0,
//	                           member 16 hex digits of the id with the sign bit
//	                           flipped, so byte order is id (send) order; its size
//	                           is the pending count
//	{P a:<app>}:online         set of online device names
//	{P a:<app>}:n:<seq_no>     SeqEntry JSON, expiring at its ExpiresAt (PXAT)
//	{P a:<app>}:m:<id>         Message JSON
//	{P a:<app>}:msgs           the app's message ids (members as in the queue,
//	                           score 0), for ListMessages
//	{P a:<app>}:exp            expiry index of pending messages: score ExpireTime,
//	                           member as in the queue
//	{P a:<app>}:outbox         outbox: sorted set of OutboxEntry JSON scored by Seq
//	{P a:<app>}:cbq:<url>      delivery queue, like the outbox
//	{P a:<app>}:cbqs           set of URLs whose queues hold entries
//	{P a:<app>}:dead           dead letters: DeadLetter JSON scored by id
//	{P a:<app>}:act:cb|exp     activity flags (see active.go)
//	{P a:<app>}:ev             the app's event log: a stream (see events.go)
//	{P a:<app>}:evlast         the last stream id the log handed out
//	{P a:<app>}:evtrim         the highest stream id trimmed from the log
//	{P a:<app>}:tag:<tag>      sorted set of the names of the devices carrying the
//	                           tag (score 0), written with the device (fleet.go)
//	{P a:<app>}:bc:<id>        a broadcast: hash of its JSON (def) and progress
//	                           fields (fleetmsgs.go)
//	{P a:<app>}:bt:<id>:<n>    chunk n of a broadcast's targets: the device names
//	                           joined by \0, deleted by the step that reaches them
//	{P a:<app>}:c:<id>         Command JSON; co:<name> and cdue index the open
//	                           ones (commands.go)
//	{P a:<app>}:job:<id>       a job: hash of its JSON (def) and the fields its
//	                           steps move; jt:<id> its targets (a list),
//	                           jx:<id> its executions, jc:<id> their counts by
//	                           state, ji:<id> and js:<id>:<state> indexes of
//	                           them by target index (jobs.go)
//
// Service-wide keys share the tag {P g}:
//
//	{P g}:apps                 sorted set of app keys (ListApps)
//	{P g}:seq                  the Seq counter (INCRBY; never reset, so a Seq is
//	                           never handed out twice, whatever was deleted)
//	{P g}:maxid                the highest message id given to CreateMessage
//	{P g}:act:cb               apps that may hold outbox entries or queued callbacks
//	{P g}:act:exp              apps that may hold pending messages
//	{P g}:online               apps that have had online devices (only grows)
//	{P g}:bcasts               "<id> <app>" of broadcasts that may be active
//	{P g}:jobs                 "<id> <app>" of jobs that may be active
//	{P g}:cmdapps              apps that have had commands
//	P meta:<key>               GetMeta/PutMeta values
//	P events                   pub/sub channel: the app key of each append
//
// Seqs and dead-letter ids are sorted-set scores, which are doubles: exact
// below 2^53, which a counter incremented per record never reaches.
// Message ids and versions may not fit a double, so they are members,
// strings or hash fields, compared as decimal strings in Lua.
//
// # One slot per write, and the global indexes
//
// In Cluster mode a script may only touch keys of one slot, so no write
// spans an app's keys and a global key atomically. Every write that the
// contract makes atomic stays within one app's slot; the global keys are
// written in a separate step, in an order that a crash can only leave in
// a harmless state:
//   - CreateApp adds the key to {P g}:apps, then stores the app with SET
//     NX; ListApps skips index entries without an app.
//   - On Redis Cluster, CreateMessage first runs a script on {P g} that
//     raises maxid to the message id, takes the Seqs its records need and
//     adds the app to the activity indexes, then writes the message in the
//     app's slot. A crash between leaves maxid above every stored id and a
//     gap in the Seqs, neither of which is ever reused. UpdateMessage,
//     MoveCallbacks and RedeliverDeadLetter take their Seqs the same way.
//     On standalone Redis and Sentinel, where the global keys share the
//     server with the app's keys, the message script does this itself
//     (after its checks, so a refused message takes nothing): one round
//     trip and one write instead of two, which with appendfsync always
//     is most of the cost of a send.
//   - A device joins {P g}:online before it is marked online.
//   - ReadOutbox, CallbackQueues and ExpiredMessages merge the per-app
//     outboxes, queues and expiry indexes of the apps listed in
//     {P g}:act:cb and {P g}:act:exp. A per-app flag in the app's slot,
//     set by the same script that adds entries, lets readers drop idle
//     apps from those sets without ever dropping one that holds entries;
//     active.go describes the protocol. Open re-adds apps whose flag is
//     set, repairing the one crash window that could leave an app out.
//   - RouteOutbox runs one script per app: each app's entries move
//     atomically; a crash between apps leaves the rest in the outbox.
//
// A consequence: one app's data lives on one Cluster shard. Apps spread
// over the shards; a single app larger than one Redis node does not.
//
// # Atomicity
//
// Lua scripts (scripts.go), each doing all its checks before its first
// write so that it writes all or nothing (Redis refuses a script's first
// write when out of memory, never a later one):
//   - CreateDevices: every free name with its shadow, per-name results;
//   - DeleteDevice: device, shadow, queue, index and online entries;
//   - SetDesired: seq_no check, version check, merge, seq_no record;
//   - ReportProperties: version check or assignment, merge (with
//     Report.Emit, an optimistic transaction, as the events depend on
//     the shadow it leaves);
//   - AppendEvents, TrimEvents: the app's stream and its two keys; every
//     write that emits events appends them in its own script or MULTI;
//   - CreateMessage: seq_no check, device check, queue limit (ZCARD of
//     the queue against MaxPending), message, its entry in the app's
//     message index, queue, expiry index, outbox entries, seq_no record
//     (PXAT), and off Cluster the global step;
//   - UpdateMessage's write: compare-and-set of the message JSON as read,
//     leaving the queue and expiry index, outbox entries;
//   - RouteOutbox, DeleteCallbacks, MoveCallbacks, PutDeadLetter,
//     RedeliverDeadLetter: entry moves within the app's slot.
//   - CreateCommands and StartJob: seq_no check, the job's state and step
//     (StartJob), a compare-and-set of each queued command's device as
//     admission read it (exists, open count), then the commands, their
//     indexes, their executions and the job's counts, the step, seq_no
//     record and events;
//   - CreateJob: seq_no check, id check, the job and its targets.
//
// The functions callers pass to UpdateApp, UpdateDevice, UpdateCommand,
// UpdateJob and UpdateMessage cannot run inside Redis, so those are
// optimistic: UpdateApp, UpdateDevice, UpdateCommand (with the command's
// execution and job counts, a script in its MULTI) and UpdateJob read
// under WATCH and write in MULTI/EXEC; UpdateMessage
// reads the message and its script writes only if the message is
// unchanged, a compare-and-set that needs one round trip fewer than WATCH
// and can also take the conditional steps of the transition. On a
// conflict each reads again and calls fn again, so fn may run more than
// once and must have no side effects. PutSeq is SET NX PXAT.
//
// The client does not retry commands by itself (MaxRetries -1): a write
// whose reply was lost may have been applied, and running it again could,
// for example, find its own seq_no used. The error reaches the REST
// client, whose retry with the same seq_no replays the stored response.
//
// # Durability
//
// Every write returns after Redis acknowledged it, which is only as
// durable as the server's persistence:
//   - appendonly yes, appendfsync always: Redis fsyncs the AOF before it
//     replies (writes arriving together share an fsync), so a 200 survives
//     a crash of Redis or of its machine. This is the setting that matches
//     the embedded store, whose 200 means the write is on disk.
//   - appendfsync everysec (Redis's default with AOF): a crash of the
//     machine may lose the last second of acknowledged writes; a crash of
//     the Redis process alone loses nothing, as the kernel holds the data.
//   - RDB snapshots only, or no persistence: a restart loses everything
//     since the last snapshot. Not for production.
//
// Reads see only durable writes under appendfsync always, which is why
// Barrier does nothing here: Redis appends a write to the AOF buffer as
// it runs, and in beforeSleep writes and fsyncs that buffer before it
// sends the replies of the event loop iteration (server.c, "must be done
// before handleClientsWithPendingWrites, in case of appendfsync=always";
// aof.c flushAppendOnlyFile exits rather than reply when the fsync
// fails). A reply to a read therefore never reflects a write that a crash
// could take back, and what devmsg sends a device or a receiver after
// such a read survives a crash. (Pebble shows a write before its fsync;
// see store.Store.Barrier.) With no-appendfsync-on-rewrite yes Redis skips
// that fsync during a rewrite, which weakens every write, not only reads.
//
// Scripts are written to the AOF and to replicas as their effects wrapped
// in MULTI/EXEC, so a torn AOF tail loses a whole script or nothing.
// Replication is asynchronous: after a Sentinel or Cluster failover, the
// new master may lack the last writes the old one acknowledged. Running
// WAIT numreplicas timeout after a write, on the same connection, would
// make a write wait for replicas; this package does not do so.
//
// # Files
//
// The package is over 2,000 lines because it is the whole store.Store
// contract, each write a Lua script or a transaction that checks before
// it writes; splitting it into packages would only export its key
// layout and scripts. Its files split it by concern: redis.go (open,
// keys, apps, devices, presence, meta), shadow.go (shadows and seq_no
// entries), messages.go, callbacks.go (outbox, delivery queues, dead
// letters), scripts.go (the Lua), events.go (the event log), fence.go
// (the cluster fence) and active.go (the activity index).
package redis
