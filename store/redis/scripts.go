package redis

// The Lua scripts. Each touches only the keys it is given, all of one
// hash slot (one app's, or the global ones), so it runs on Redis Cluster.
// Every script that writes does all its checks before its first write:
// Redis refuses a script's first write when it is out of memory and lets
// it finish once it has written, so a script either writes all or nothing.
//
// Numbers that may exceed 2^53 (message ids, versions) travel as decimal
// strings and are compared with cmp, never converted to Lua numbers,
// which are doubles. Seqs come from INCRBY and stay far below 2^53, so
// they are used as sorted-set scores.

// Script replies below zero are refusals; the scripts use the numbers.
const (
	codeSeqUsed  = -1
	codeNotFound = -2
	codeConflict = -3 // version conflict, or queue full for createMessage
	codeExists   = -4
	codeRetry    = -5 // compare-and-set lost: read again
)

// Bits of a non-negative reply: the global activity indexes the app must
// be added to after the write (see active.go).
const (
	flagListCB  = 1
	flagListExp = 2
)

// cmpLua compares two canonical decimal int64 strings byte by byte, so
// neither precision nor the server's collation locale matters.
const cmpLua = `
local function cmp(a, b)
  local na, nb = a:byte(1) == 45, b:byte(1) == 45
  if na ~= nb then
    if na then return -1 end
    return 1
  end
  local r = 0
  if #a ~= #b then
    if #a < #b then r = -1 else r = 1 end
  else
    for i = 1, #a do
      local x, y = a:byte(i), b:byte(i)
      if x ~= y then
        if x < y then r = -1 else r = 1 end
        break
      end
    end
  end
  if na then r = -r end
  return r
end
`

// listLua marks an app's activity flag listed and says whether the app
// must (again) be added to the global index; see active.go.
const listLua = `
local function list(flag)
  if redis.call('GET', flag) ~= '1' then
    redis.call('SET', flag, '1')
    return true
  end
  return false
end
`

// globalScript runs on the global slot before a write that needs Seqs or
// names a message id: it raises the highest message id, hands out n Seqs
// and adds the app to the activity indexes it is about to join.
// KEYS: maxid, seq, act:cb, act:exp. ARGV: id ("" for none), n, app,
// add to cb ("1"), add to exp ("1"). Returns the last Seq handed out.
var globalScript = newScript(cmpLua + `
if ARGV[1] ~= '' then
  local cur = redis.call('GET', KEYS[1]) or '0'
  if cmp(ARGV[1], cur) > 0 then redis.call('SET', KEYS[1], ARGV[1]) end
end
local last = 0
local n = tonumber(ARGV[2])
if n > 0 then last = redis.call('INCRBY', KEYS[2], n) end
if ARGV[4] == '1' then redis.call('SADD', KEYS[3], ARGV[3]) end
if ARGV[5] == '1' then redis.call('SADD', KEYS[4], ARGV[3]) end
return last
`)

// createDevicesScript creates the devices whose names are free, each with
// a new shadow and its tags in the app's tag index, appends the events of
// each device it creates, and returns 1 for each name that was taken, 0
// otherwise. The tag index keys are the tag-key prefix (on the app's slot)
// followed by the tag, named by the device JSON's tags.
// KEYS: device index, then device and shadow key of each device, then the
// event stream and last-id keys. ARGV: event channel, app, device count,
// tag-key prefix, then name, device JSON and event count of each device,
// then the events of each device in turn.
var createDevicesScript = newScript(appendEventsLua + tagLua + `
local n = tonumber(ARGV[3])
local res = {}
for i = 1, n do res[i] = redis.call('EXISTS', KEYS[2*i]) end
local starts, a = {}, 5 + 3 * n
for i = 1, n do
  local k = tonumber(ARGV[3*i + 4])
  if res[i] == 0 then
    redis.call('SET', KEYS[2*i], ARGV[3*i + 3])
    redis.call('DEL', KEYS[2*i+1])
    redis.call('HSET', KEYS[2*i+1], 'v', '1', 'rv', '0', 'dt', '0', 'rt', '0', 'sdk', '', 'appv', '')
    redis.call('ZADD', KEYS[1], 0, ARGV[3*i + 2])
    tagIndex('ZADD', ARGV[4], ARGV[3*i + 3], ARGV[3*i + 2])
    for j = 0, k - 1 do starts[#starts + 1] = a + 4 * j end
  end
  a = a + 4 * k
end
appendEvents(KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[1], ARGV[2], starts)
return res
`)

// tagLua adds (op ZADD) or removes (ZREM) name in the tag index of each
// tag the device JSON holds; prefix is the app's tag-key prefix, so every
// key it builds is on the app's slot.
const tagLua = `
local function tagIndex(op, prefix, json, name)
  local tags = cjson.decode(json)['tags']
  if type(tags) ~= 'table' then return end
  for _, t in ipairs(tags) do
    if op == 'ZADD' then
      redis.call('ZADD', prefix .. t, 0, name)
    else
      redis.call('ZREM', prefix .. t, name)
    end
  end
end
`

// deleteDeviceScript removes a device, its shadow, its pending queue and
// its place in the device, online and tag indexes, and appends the events.
// KEYS: device, shadow, queue, online set, device index, event stream,
// event last id. ARGV: name, event channel, app, tag-key prefix, then the
// events.
var deleteDeviceScript = newScript(appendEventsLua + tagLua + `
local dev = redis.call('GET', KEYS[1])
if not dev then return -2 end
tagIndex('ZREM', ARGV[4], dev, ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
appendEvents(KEYS[6], KEYS[7], ARGV[2], ARGV[3], span(5, (#ARGV - 4) / 4))
return 0
`)

// setDesiredScript checks the seq_no, the device and the version, merges
// the desired values and records the seq_no, and returns the shadow hash.
// KEYS: seq_no entry, shadow. ARGV: has seq ("1"), entry JSON, entry
// expiry (Unix ms), version, time, then name and value of each property.
var setDesiredScript = newScript(`
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[2]) == 0 then return -2 end
if redis.call('HGET', KEYS[2], 'v') ~= ARGV[4] then return -3 end
for i = 6, #ARGV, 2 do
  redis.call('HSET', KEYS[2], 'd:' .. ARGV[i], ARGV[i+1], 'ds:' .. ARGV[i], ARGV[5])
end
redis.call('HINCRBY', KEYS[2], 'v', 1)
redis.call('HSET', KEYS[2], 'dt', ARGV[5])
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) end
return redis.call('HGETALL', KEYS[2])
`)

// reportScript applies a device's report and returns the shadow hash.
// It is store.ApplyReport written in Lua, so that a report without
// events is one round trip with no optimistic retry; a report with
// events applies store.ApplyReport in Go under WATCH and then runs this
// script with the version made explicit (reportEmitting). KEYS: shadow. ARGV: version ("0": the next one), time, sdk_ver,
// app_ver, then name and value of each property.
var reportScript = newScript(reportLua)

const reportLua = cmpLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if ARGV[1] ~= '0' and cmp(ARGV[1], redis.call('HGET', KEYS[1], 'rv') or '0') <= 0 then return -3 end
if ARGV[1] == '0' then
  redis.call('HINCRBY', KEYS[1], 'rv', 1)
else
  redis.call('HSET', KEYS[1], 'rv', ARGV[1])
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'r:' .. ARGV[i], ARGV[i+1], 'rs:' .. ARGV[i], ARGV[2])
end
redis.call('HSET', KEYS[1], 'rt', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'sdk', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'appv', ARGV[4]) end
return redis.call('HGETALL', KEYS[1])
`

// seqLua rewrites the JSON of an outbox entry, marshalled with Seq 0 (its
// first field: {"seq":0,...), to hold seq; addOutbox adds the n entries
// given as (Seq, JSON) pairs of ARGV from base on to the outbox key,
// inline with the Seqs first, first+1, ... instead.
const seqLua = `
local function withSeq(j, seq)
  return '{"seq":' .. string.format('%d', seq) .. string.sub(j, 9)
end
local function addOutbox(key, base, n, inline, first)
  for i = 0, n - 1 do
    local seq, j = ARGV[base + 2*i], ARGV[base + 1 + 2*i]
    if inline then
      seq = first + i
      j = withSeq(j, seq)
    end
    redis.call('ZADD', key, seq, j)
  end
end
`

// createMessageScript stores a message, queues it if pending, adds its
// records to the outbox and records the seq_no. Returns a refusal code,
// or the flagList bits of the global indexes the app must join.
//
// Inline (not on Redis Cluster, where the global keys share the server),
// it also does globalScript's work after its checks: it raises the
// highest message id, hands out the Seqs, rewriting each entry's JSON to
// hold its Seq, and adds the app to the indexes in the same atomic write,
// so it asks for no adds afterwards.
//
// KEYS: seq_no entry, message, device, queue, expiry index, outbox, cb
// flag, exp flag; inline also maxid, Seq counter, act:cb, act:exp; last
// the app's message index.
// ARGV: has seq, entry JSON, entry expiry, pending ("1"), message JSON,
// queue member, expire time, MaxPending, inline ("1"), message id, app,
// then Seq (0 inline) and JSON of each outbox entry.
var createMessageScript = newScript(cmpLua + listLua + seqLua + `
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local pending = ARGV[4] == '1'
if pending then
  if redis.call('EXISTS', KEYS[3]) == 0 then return -2 end
  if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[8]) then return -3 end
end
local inline = ARGV[9] == '1'
local n = (#ARGV - 11) / 2
local first = 0
if inline then
  local cur = redis.call('GET', KEYS[9]) or '0'
  if cmp(ARGV[10], cur) > 0 then redis.call('SET', KEYS[9], ARGV[10]) end
  if n > 0 then
    first = redis.call('INCRBY', KEYS[10], n) - n + 1
    redis.call('SADD', KEYS[11], ARGV[11])
  end
  if pending then redis.call('SADD', KEYS[12], ARGV[11]) end
end
local res = 0
redis.call('SET', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[#KEYS], 0, ARGV[6])
if pending then
  redis.call('ZADD', KEYS[4], 0, ARGV[6])
  redis.call('ZADD', KEYS[5], ARGV[7], ARGV[6])
  if list(KEYS[8]) then res = res + 2 end
end
addOutbox(KEYS[6], 12, n, inline, first)
if n > 0 and list(KEYS[7]) then res = res + 1 end
if ARGV[1] == '1' then redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) end
if inline then return 0 end
return res
`)

// updateMessageScript stores an updated message if it is still as read
// (compare-and-set), takes it off its queue when it leaves pending and
// adds its new records to the outbox. Returns codeRetry, or flagList
// bits. Inline, it hands out the Seqs and lists the app itself, as
// createMessageScript does.
// KEYS: message, queue, expiry index, outbox, cb flag; inline also Seq
// counter, act:cb. ARGV: JSON as read, new JSON, leaving pending ("1"),
// queue member, inline ("1"), app, then Seq (0 inline) and JSON of each
// new outbox entry.
var updateMessageScript = newScript(listLua + seqLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -5 end
local inline = ARGV[5] == '1'
local n = (#ARGV - 6) / 2
local first = 0
if inline and n > 0 then
  first = redis.call('INCRBY', KEYS[6], n) - n + 1
  redis.call('SADD', KEYS[7], ARGV[6])
end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
end
addOutbox(KEYS[4], 7, n, inline, first)
local res = 0
if n > 0 and list(KEYS[5]) and not inline then res = 1 end
return res
`)

// routeScript moves one app's outbox entries to their delivery queues.
// An entry no longer in the outbox (another worker routed it) is skipped,
// so no entry is queued twice; entries routed nowhere go in runs of
// consecutive Seqs, each removed with one command.
// KEYS: outbox, queue set, then the queue of each URL.
// ARGV: for each run its first and last Seq, URL and index of its queue
// key (0: none; else the run is one entry).
var routeScript = newScript(`
for i = 1, #ARGV, 4 do
  local q = tonumber(ARGV[i+3])
  if q == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i+1])
  else
    local found = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i])
    if #found > 0 then
      redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i])
      redis.call('ZADD', KEYS[q], ARGV[i], found[1])
      redis.call('SADD', KEYS[2], ARGV[i+2])
    end
  end
end
return 0
`)

// deleteCallbacksScript removes entries from a delivery queue.
// KEYS: queue, queue set. ARGV: URL, then the Seqs.
var deleteCallbacksScript = newScript(`
for i = 2, #ARGV do redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i]) end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 0
`)

// moveCallbacksScript moves the entries still in one queue to another
// with new Seqs.
// KEYS: from queue, to queue, queue set. ARGV: from URL, to URL, then old
// Seq, new Seq and new JSON of each entry.
var moveCallbacksScript = newScript(`
local moved = 0
for i = 3, #ARGV, 3 do
  if redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i]) > 0 then
    redis.call('ZADD', KEYS[2], ARGV[i+1], ARGV[i+2])
    moved = moved + 1
  end
end
if moved > 0 then redis.call('SADD', KEYS[3], ARGV[2]) end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[3], ARGV[1]) end
return moved
`)

// putDeadLetterScript files a dead letter and takes its entries off their
// queue. KEYS: dead letters, queue, queue set. ARGV: id, JSON, URL, then
// the entries' Seqs.
var putDeadLetterScript = newScript(`
if redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1]) > 0 then return -4 end
for i = 4, #ARGV do redis.call('ZREMRANGEBYSCORE', KEYS[2], ARGV[i], ARGV[i]) end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[3]) end
return 0
`)

// redeliverScript deletes a dead letter and queues its entries again with
// new Seqs. Returns codeNotFound if another call took it first, else
// flagList bits. KEYS: dead letters, queue, queue set, cb flag.
// ARGV: id, URL, then new Seq and JSON of each entry.
var redeliverScript = newScript(listLua + `
if redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return -2 end
local res = 0
if #ARGV > 2 then
  for i = 3, #ARGV, 2 do redis.call('ZADD', KEYS[2], ARGV[i], ARGV[i+1]) end
  redis.call('SADD', KEYS[3], ARGV[2])
  if list(KEYS[4]) then res = 1 end
end
return res
`)

// pruneScript is the first step of dropping an idle app from a global
// activity index: when none of the app's collections exist it marks the
// flag unlisted and returns 1. KEYS: flag, then the collections.
var pruneScript = newScript(`
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
if redis.call('GET', KEYS[1]) == '0' then return 0 end
redis.call('SET', KEYS[1], '0')
return 1
`)

// unlistScript is the last step: after the app left the global index, it
// deletes the flag unless a writer listed the app meanwhile, in which case
// it returns 1 and the app goes back into the index. KEYS: flag.
var unlistScript = newScript(`
if redis.call('GET', KEYS[1]) == '0' then
  redis.call('DEL', KEYS[1])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
return 0
`)
