-- Deliveries waiting in the indexed inboxes, and when the oldest delivery of the work
-- item at the head of the ready list arrived (its received_at, or false).
-- KEYS[1] = P:inboxes   KEYS[2] = P:ready
-- ARGV[1..5] = the per-ref key prefixes (Keys.per_ref): inbox, lock, backoff, parked,
--              delivery
-- Returns {depth, received_at or false}.
local INBOX, DELIVERY = ARGV[1], ARGV[5]
local depth = 0
for _, ref in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  depth = depth + redis.call('LLEN', INBOX .. ref)
end
local received = false
local ref = redis.call('LINDEX', KEYS[2], 0)
if ref then
  local id = redis.call('LINDEX', INBOX .. ref, 0)
  if id then
    received = redis.call('HGET', DELIVERY .. id, 'received_at')
  end
end
return {depth, received}
