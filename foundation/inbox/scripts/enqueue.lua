-- The receiver's enqueue of one delivery (foundation.inbox.enqueue.DeliveryQueue).
-- KEYS[1] = P:delivery:seen:ID   dedupe marker
-- KEYS[2] = P:delivery:ID        delivery record (hash)
-- KEYS[3] = P:inbox:REF          the work item's inbox, or the shared one (list)
-- KEYS[4] = P:ready              refs whose inbox needs a worker (list)
-- KEYS[5] = P:inboxes            refs whose inbox may hold deliveries (set)
-- KEYS[6] = P:wake               id of the pending wake-up job (string, expires)
-- ARGV[1] = ID   ARGV[2] = REF (the inbox's ref)
-- ARGV[3] = seconds the marker and the record are kept
-- ARGV[4] = expiry of P:wake, milliseconds
-- ARGV[5] = the id of the wake-up job to queue if this delivery needs one
-- ARGV[6..] = the record's field/value pairs (DeliveryRecord.to_redis)
-- Returns 0 when the delivery id was already seen (nothing written), 1 when queued,
-- 2 when queued and P:wake was set to ARGV[5]: the caller then queues that RQ job.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
-- Check types before the first write: a script error after a write would leave
-- half a delivery behind (Redis does not roll scripts back). LLEN fails on anything but
-- a list, and tells whether this append activates the inbox; only then are the ready
-- list and the inbox index written, so only then are their types checked.
local queued = redis.call('LLEN', KEYS[3])
local function holds(key, kind)
  local t = redis.call('TYPE', key)['ok']
  return t == 'none' or t == kind
end
if queued == 0 and not (holds(KEYS[4], 'list') and holds(KEYS[5], 'set')) then
  return redis.error_reply('WRONGTYPE the-loop enqueue: queue or inbox key has the wrong type')
end
-- Start from a clean hash: an expired marker may leave an old record behind.
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[2], ARGV[3])
local result = 1
redis.call('RPUSH', KEYS[3], ARGV[1])
if queued == 0 then
  -- Activation: the inbox was empty, so nobody is on it. List it as ready.
  redis.call('RPUSH', KEYS[4], ARGV[2])
  redis.call('SADD', KEYS[5], ARGV[2])
  if redis.call('SET', KEYS[6], ARGV[5], 'NX', 'PX', ARGV[4]) then
    result = 2
  end
end
-- Marked seen last: a failure above leaves it unset, so a redelivery is accepted.
redis.call('SET', KEYS[1], '1', 'EX', ARGV[3])
return result
