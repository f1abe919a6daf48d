-- The reaper lists the stranded inboxes of one round, in one call.
-- KEYS[1] = P:ready
-- ARGV[1..5] = the per-ref key prefixes (Keys.per_ref): inbox, lock, backoff, parked,
--              delivery
-- ARGV[6..] = refs the sweep saw with deliveries, a free lock and no hold
-- Appends to P:ready each ref whose inbox still holds deliveries, whose lock is still
-- free, that is still not held and not listed yet. P:ready is read once (a table), not
-- searched once per ref: listing n refs costs O(n + length of P:ready), not O(n times
-- it). Returns the refs listed.
local INBOX, LOCK, BACKOFF, PARKED = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local listed = {}
for _, ref in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  listed[ref] = true
end
local out = {}
for i = 6, #ARGV do
  local ref = ARGV[i]
  if not listed[ref] and redis.call('LLEN', INBOX .. ref) > 0
      and redis.call('EXISTS', LOCK .. ref, BACKOFF .. ref, PARKED .. ref) == 0 then
    redis.call('RPUSH', KEYS[1], ref)
    listed[ref] = true
    out[#out + 1] = ref
  end
end
return out
