-- One step of a drain (foundation.inbox.drain.Inboxes.step): finish the delivery just
-- handled, then take the next one.
-- KEYS[1] = P:ready   KEYS[2] = P:wake   KEYS[3] = P:inboxes (an inbox found empty leaves
-- the index here, under its lock, so the index holds only inboxes with work)
-- ARGV[1..5] = the per-ref key prefixes (Keys.per_ref): inbox, lock, backoff, parked,
--              delivery
-- ARGV[6] = lock token   ARGV[7] = lock expiry, ms
-- ARGV[8] = ref of the delivery just handled ('' = none)   ARGV[9] = its delivery id
-- ARGV[10] = '1': pop it off the inbox (only if it is still the head)
-- ARGV[11] = '1': delete its record
-- ARGV[12] = then, for that ref: 'more' (take its next delivery), 'release' (let go: a
--            scheduled retry lists it again), 'yield' (let go, listed again if it has more)
-- ARGV[13] = a ref to take now ('' = none)
-- ARGV[14] = at most this many refs popped off P:ready (0 = leave the ready list alone)
-- Returns {what, ref, delivery id, attempt, first, #ready, wake pending, record, done,
-- route}:
-- what 'ok' (a delivery was taken: its attempt is counted, first = 1 on its first start,
-- record = its fields, the body only when the router acts on its event and action,
-- route = the router's route for them, '' when it has none),
-- else 'idle', 'locked', 'held' or 'empty'; done says what became of ARGV[8]: 'more',
-- 'released', 'yielded', 'held', 'empty', 'lost' (the lock was no longer ours) or
-- 'changed' (it was no longer the head).
local INBOX, LOCK, BACKOFF, PARKED, DELIVERY = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
-- The record's fields read before the body (foundation.inbox.record.FIELDS); the loader
-- writes them in, and the router's table: "event action" (or "event *") -> the route
-- (true when the loader was given only the pairs).
local FIELDS = {--[[FIELDS]]}
local ROUTED = {--[[ROUTED]]}
local token, ttl = ARGV[6], ARGV[7]
local EVENT, ACTION
for i, name in ipairs(FIELDS) do
  if name == 'event' then EVENT = i elseif name == 'action' then ACTION = i end
end
local function held(ref)
  return redis.call('EXISTS', PARKED .. ref, BACKOFF .. ref) > 0
end
-- With ref's lock ours: the id at its inbox head, or nil (and the lock let go). fresh:
-- the lock was just taken, after a look at held().
local function head_of(ref, fresh)
  local lock = LOCK .. ref
  if not fresh and held(ref) then
    redis.call('DEL', lock)
    return nil, 'held'
  end
  local id = redis.call('LINDEX', INBOX .. ref, 0)
  if not id then
    redis.call('DEL', lock)
    redis.call('SREM', KEYS[3], ref)
    return nil, 'empty'
  end
  if not fresh then
    redis.call('PEXPIRE', lock, ttl)
  end
  return id
end
local function took(ref, id, done)
  local rec = DELIVERY .. id
  local attempt, first = 0, 1
  local values = redis.call('HMGET', rec, unpack(FIELDS))
  local record = {}
  for i, name in ipairs(FIELDS) do
    if values[i] then
      record[#record + 1] = name
      record[#record + 1] = values[i]
    end
  end
  local event = values[EVENT]
  local route = ''
  if event then
    attempt = redis.call('HINCRBY', rec, 'attempts', 1)
    first = redis.call('HSETNX', rec, 'started', 1)
    -- The 15 KB body only when the router will read it (the route alone ignores the rest).
    local routed = ROUTED[event .. ' ' .. (values[ACTION] or '')] or ROUTED[event .. ' *']
    if routed then
      record[#record + 1] = 'body'
      record[#record + 1] = redis.call('HGET', rec, 'body')
      if type(routed) == 'string' then
        route = routed
      end
    end
  end
  return {'ok', ref, id, attempt, first, redis.call('LLEN', KEYS[1]),
          redis.call('EXISTS', KEYS[2]), record, done, route}
end
local function nothing(what, done)
  return {what, '', '', 0, 0, redis.call('LLEN', KEYS[1]), redis.call('EXISTS', KEYS[2]),
          {}, done, ''}
end

local done = ''
local ref = ARGV[8]
if ref ~= '' then
  local lock, inbox = LOCK .. ref, INBOX .. ref
  -- A lock no longer ours: its holder has the delivery; acknowledge nothing.
  local ours = redis.call('GET', lock) == token
  if ours and ARGV[11] == '1' then
    redis.call('DEL', DELIVERY .. ARGV[9])
  end
  local popped = true
  if ours and ARGV[10] == '1' then
    if redis.call('LINDEX', inbox, 0) == ARGV[9] then
      redis.call('LPOP', inbox)
    else
      popped = false
    end
  end
  if not ours then
    done = 'lost'
  elseif not popped then
    redis.call('DEL', lock)
    done = 'changed'
  elseif ARGV[12] == 'more' then
    local id, why = head_of(ref)
    if id then
      return took(ref, id, 'more')
    end
    done = why
  else
    redis.call('DEL', lock)
    done = 'released'
    if redis.call('LLEN', inbox) == 0 then
      redis.call('SREM', KEYS[3], ref)
    elseif ARGV[12] == 'yield' and not held(ref) then
      redis.call('RPUSH', KEYS[1], ref)
      done = 'yielded'
    end
  end
end

local want = ARGV[13]
if want ~= '' then
  if held(want) then
    return nothing('held', done)
  end
  if not redis.call('SET', LOCK .. want, token, 'NX', 'PX', ttl) then
    return nothing('locked', done)
  end
  local id, why = head_of(want, true)
  if id then
    return took(want, id, done)
  end
  return nothing(why, done)
end

for _ = 1, tonumber(ARGV[14]) do
  local next_ref = redis.call('LPOP', KEYS[1])
  if not next_ref then
    break
  end
  -- Held: a retry or an operator lists it again. Locked: its holder re-checks its inbox
  -- as it lets go. Empty: nothing to do.
  if not held(next_ref) and redis.call('SET', LOCK .. next_ref, token, 'NX', 'PX', ttl) then
    local id = head_of(next_ref, true)
    if id then
      return took(next_ref, id, done)
    end
  end
end
return nothing('idle', done)
