package redisstore

import "github.com/redis/go-redis/v9"

// The Lua scripts the store runs. Script.Run sends EVALSHA and falls back to
// EVAL when Redis does not have the script cached (after a restart, say).
// Seqs are Lua numbers, exact up to 2^53, and are formatted with %d so
// that they never come out in exponent form.

// epochScript sets the store's epoch unless it has one, and returns it.
// KEYS: the epoch key. ARGV: a new random epoch.
var epochScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`)

// createScript stores a new session record and lists it.
// KEYS: rec, ev, tc, tco, created counter, ended set, index sets...
// ARGV: id, then the record's fields and values.
// Returns 0 when the session exists, 1 when created.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
-- Whatever a former session of this id left must not show through.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[6], ARGV[1])
local n = redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
for k = 7, #KEYS do redis.call('ZADD', KEYS[k], n, ARGV[1]) end
return 1
`)

// updateScript sets fields of an existing session record, and may change
// the time to live of the session's keys.
// KEYS: rec, ev, tc, tco.
// ARGV: ttl (ms > 0: expire the keys then; -1: keep them forever; 0: leave
// as is), then fields and values.
// Returns 0 when the session does not exist, 1 when updated.
var updateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  if ttl > 0 then redis.call('PEXPIRE', k, ttl) elseif ttl < 0 then redis.call('PERSIST', k) end
end
return 1
`)

// deleteScript removes a session's keys and its index entries.
// KEYS: rec, ev, tc, tco, lease, ended set, index sets...
// ARGV: id.
// Returns 0 when the session does not exist, 1 when deleted.
var deleteScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
for k = 6, #KEYS do redis.call('ZREM', KEYS[k], ARGV[1]) end
return 1
`)

// trimEnded is the Lua that holds the ended set to its cap
// (Options.MaxEndedSessions), for the scripts that add to it. It needs
// locals ended (the set's key), all (the index of every session), prefix
// (the store's) and max (the cap, 0 for none). It deletes the sessions
// that closed first, with their index entries, a pop per session: the
// work does not grow with the set. The sessions it deletes are named from
// prefix, not passed in KEYS: Redis Cluster refuses that, but the store's
// index sets already tie it to one Redis.
//
// A session whose keys expired (Options.EndedTTL) leaves its entry behind
// until it is popped; as the entries expire in closing order, they are at
// the low end, and up to two of them there are dropped at every call, so
// that they do not pile up when nothing is popped (no cap).
const trimEnded = `
local function gone(id)
  return redis.call('EXISTS', prefix .. 's:{' .. id .. '}:rec') == 0
end
for _ = 1, 2 do
  local oldest = redis.call('ZRANGE', ended, 0, 0)[1]
  if not oldest or not gone(oldest) then break end
  redis.call('ZREM', ended, oldest)
end
local over = max > 0 and redis.call('ZCARD', ended) - max or 0
if over > 0 then
  local popped = redis.call('ZPOPMIN', ended, over)
  for i = 1, #popped, 2 do
    local id = popped[i]
    local base = prefix .. 's:{' .. id .. '}:'
    local rec = redis.call('HMGET', base .. 'rec', 'state', 'owner')
    -- Only a closed session: an entry may outlive its session, whose id
    -- may be taken again since.
    if rec[1] == 'closed' then
      -- UNLINK frees a long log in the background.
      redis.call('UNLINK', base .. 'rec', base .. 'ev', base .. 'tc', base .. 'tco', base .. 'lease')
      redis.call('ZREM', all, id)
      if rec[2] and rec[2] ~= '' then redis.call('ZREM', prefix .. 'o:' .. rec[2], id) end
    end
  end
end
`

// setStateScript sets a session's state fields, changes the time to live
// of its keys as updateScript does, and keeps the ended set: a session
// that closes goes in, scored past every other (in closing order, by
// Redis's clock, even should it step back), and the set is trimmed to
// the cap, in the same step; one that leaves the closed state goes out.
// KEYS: rec, ev, tc, tco, ended set, all-sessions index.
// ARGV: ttl, 1 when the session closes (else 0), MaxEndedSessions,
// prefix, id, then fields and values.
// Returns 0 when the session does not exist, 1 when updated.
var setStateScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
local ttl = tonumber(ARGV[1])
for k = 1, 4 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[k], ttl) elseif ttl < 0 then redis.call('PERSIST', KEYS[k]) end
end
local ended, all, max, prefix, id = KEYS[5], KEYS[6], tonumber(ARGV[3]), ARGV[4], ARGV[5]
if ARGV[2] ~= '1' then
  redis.call('ZREM', ended, id)
  return 1
end
local t = redis.call('TIME')
local score = tonumber(t[1]) * 1000000 + tonumber(t[2])
local newest = redis.call('ZRANGE', ended, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) >= score then score = tonumber(newest[2]) + 1 end
redis.call('ZADD', ended, score, id)
` + trimEnded + `
return 1
`)

// adoptScript adds to the ended set closed sessions that are not in it:
// those a gateway closed before the set was kept. It checks again that
// each is closed, so a session deleted or reopened since the caller
// looked is not added, and trims the set to the cap as setStateScript
// does.
// KEYS: ended set, all-sessions index.
// ARGV: MaxEndedSessions, prefix, then ids and their scores (closing time
// in microseconds).
var adoptScript = redis.NewScript(`
local ended, all, max, prefix = KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2]
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if not redis.call('ZSCORE', ended, id) and redis.call('HGET', prefix .. 's:{' .. id .. '}:rec', 'state') == 'closed' then
    redis.call('ZADD', ended, ARGV[i + 1], id)
  end
end
` + trimEnded + `
return 0
`)

// pruneScript drops index entries whose session record is gone (expired),
// checking again, so that a session created since the caller looked
// stays listed.
// KEYS: index set, then the record of each id in ARGV.
// ARGV: ids.
var pruneScript = redis.NewScript(`
for i, id in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then redis.call('ZREM', KEYS[1], id) end
end
return 0
`)

// Replies of appendScript, in the first element of its reply; the second
// is the session's last seq.
const (
	appendNotFound = 0
	appendDone     = 1
	appendConflict = 2
	// appendStored: the events are stored already, byte for byte: a retry
	// of an append whose reply was lost.
	appendStored = 3
)

// appendScript appends events and merges tool calls.
// KEYS: rec, ev, tc, tco.
// ARGV: number of events n, seq of the first, MaxEvents, MaxEventBytes,
// then the n events' bytes, then a tool call id and bytes for each changed
// call. The caller has checked that the events' seqs are consecutive.
// The record's 'bytes' is the length of the kept events; a record without
// it (written before it was kept) has it counted at its next append.
var appendScript = redis.NewScript(`
local rec, ev, tc, tco = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local last = redis.call('HGET', rec, 'last')
if not last then return {0, 0} end
last = tonumber(last)
local n, first, max, maxb = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local trimmed = tonumber(redis.call('HGET', rec, 'trimmed') or '0')
if n > 0 and first ~= last + 1 then
  -- The seq of event s is in ARGV[5 + s - first]. If the kept ones among
  -- these seqs hold exactly these bytes, this is a retry of an append that
  -- was done.
  local stop = first + n - 1
  local from = math.max(first, trimmed + 1)
  if first >= 1 and stop <= last and from <= stop then
    local got = redis.call('XRANGE', ev, string.format('%d-0', from), string.format('%d-0', stop))
    if #got == stop - from + 1 then
      for i, e in ipairs(got) do
        if e[2][2] ~= ARGV[5 + from + i - 1 - first] then return {2, last} end
      end
      return {3, last}
    end
  end
  return {2, last}
end
if n > 0 then
  local bytes = redis.call('HGET', rec, 'bytes')
  if bytes then
    bytes = tonumber(bytes)
  else
    bytes = 0
    -- A page at a time: the whole log in one reply would be held in the
    -- script's memory at once.
    local from = '-'
    while last > trimmed do
      local got = redis.call('XRANGE', ev, from, '+', 'COUNT', 256)
      for _, e in ipairs(got) do bytes = bytes + #e[2][2] end
      if #got < 256 then break end
      from = '(' .. got[#got][1]
    end
  end
  for i = 1, n do
    redis.call('XADD', ev, string.format('%d-0', first + i - 1), 'e', ARGV[4 + i])
    bytes = bytes + #ARGV[4 + i]
  end
  last = first + n - 1
  redis.call('HSET', rec, 'last', string.format('%d', last))
  -- Retention: beyond MaxEvents, then the oldest while the kept bytes
  -- pass MaxEventBytes, the newest event always kept: statestore.Options.Over.
  local keep, page = trimmed, 1
  local function over()
    return (max > 0 and last - keep > max) or (maxb > 0 and bytes > maxb and last - keep > 1)
  end
  -- Read a page at a time, from one event up: an append at the caps drops
  -- about as many as it adds, and each read copies the events' bytes.
  while over() do
    local got = redis.call('XRANGE', ev, string.format('%d-0', keep + 1), '+', 'COUNT', page)
    if #got == 0 then break end
    page = math.min(2 * page, 256)
    for _, e in ipairs(got) do
      if not over() then break end
      bytes = bytes - #e[2][2]
      keep = tonumber(string.match(e[1], '^(%d+)'))
    end
  end
  if keep > trimmed then
    trimmed = keep
    redis.call('XTRIM', ev, 'MINID', string.format('%d-0', trimmed + 1))
    redis.call('HSET', rec, 'trimmed', string.format('%d', trimmed))
  end
  redis.call('HSET', rec, 'bytes', string.format('%d', bytes))
end
if #ARGV >= 5 + n then
  -- The record's 'cbytes' is the length of the tool calls; one without
  -- it has it counted here.
  local cbytes = redis.call('HGET', rec, 'cbytes')
  if cbytes then
    cbytes = tonumber(cbytes)
  else
    cbytes = 0
    for _, id in ipairs(redis.call('HKEYS', tc)) do cbytes = cbytes + redis.call('HSTRLEN', tc, id) end
  end
  for i = 5 + n, #ARGV, 2 do
    cbytes = cbytes - redis.call('HSTRLEN', tc, ARGV[i]) + #ARGV[i + 1]
    if redis.call('HSET', tc, ARGV[i], ARGV[i + 1]) == 1 then redis.call('RPUSH', tco, ARGV[i]) end
  end
  redis.call('HSET', rec, 'cbytes', string.format('%d', cbytes))
end
-- A closed session's keys expire together, new ones included.
local ttl = redis.call('PTTL', rec)
if ttl > 0 then
  for k = 2, 4 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return {1, last}
`)

// acquireScript takes a lease, or extends it for its holder.
// KEYS: lease. ARGV: holder, ttl in ms.
// Returns "" when holder has the lease, else the holder that has it.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return '' end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return ''
end
return cur
`)

// releaseScript deletes a lease if holder has it.
// KEYS: lease. ARGV: holder.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Replies of the read scripts, in the first element of their reply.
const (
	readNotFound = 0
	readDone     = 1
	readTrimmed  = 2
)

// eventsScript reads events, checking them against the record.
// KEYS: rec, ev. ARGV: after, XRANGE start, count (0: all).
// Returns {0} when the session does not exist, {2, trimmed} when events
// after after were trimmed, else {1, trimmed, the events' bytes...}.
var eventsScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'last', 'trimmed')
if not v[1] then return {0} end
local trimmed = tonumber(v[2])
if tonumber(ARGV[1]) < trimmed then return {2, trimmed} end
local got
if tonumber(ARGV[3]) > 0 then
  got = redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', ARGV[3])
else
  got = redis.call('XRANGE', KEYS[2], ARGV[2], '+')
end
local r = {1, trimmed}
for _, e in ipairs(got) do r[#r + 1] = e[2][2] end
return r
`)

// toolCallsScript reads the tool calls in first-seen order, and the seq
// they reflect.
// KEYS: rec, tc, tco.
// Returns {0} when the session does not exist, else {1, last seq, the
// calls' bytes...}.
var toolCallsScript = redis.NewScript(`
local last = redis.call('HGET', KEYS[1], 'last')
if not last then return {0} end
local r = {1, last}
for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  r[#r + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return r
`)

// toolCallScript reads one tool call, and the seq it reflects.
// KEYS: rec, tc. ARGV: the call's id.
// Returns {0} when the session does not exist, else {1, last seq} and,
// when the session has the call, its bytes.
var toolCallScript = redis.NewScript(`
local last = redis.call('HGET', KEYS[1], 'last')
if not last then return {0} end
local r = {1, last}
local tc = redis.call('HGET', KEYS[2], ARGV[1])
if tc then r[3] = tc end
return r
`)
