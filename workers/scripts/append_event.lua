-- Append one entry to a work item's event log and index it, fenced (fence.lua); returns
-- {'ok', its sequence number} (the list position, so RPUSH's answer), or fence()'s reply.
-- KEYS[1] P:lock:REF   KEYS[2] P:fence:REF
-- KEYS[3] P:events:REF (list)   KEYS[4] P:event-types:REF (set)
-- KEYS[5] P:events-by:ID:REF (list of "SEQ ENVELOPE"), only for an entry a delivery caused
-- ARGV[1] lock token   ARGV[2] writer   ARGV[3] write number
-- ARGV[4] the entry's JSON envelope   ARGV[5] its type   ARGV[6] TTL seconds of KEYS[5]
local n = tonumber(ARGV[3])
local refused = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], n)
if refused then
  return refused
end
local seq = redis.call('RPUSH', KEYS[3], ARGV[4])
redis.call('SADD', KEYS[4], ARGV[5])
-- A done item's log expires; its index of types goes with it.
local ttl = redis.call('PTTL', KEYS[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[4], ttl)
end
if KEYS[5] then
  redis.call('RPUSH', KEYS[5], seq .. ' ' .. ARGV[4])
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[6]))
end
return fenced(KEYS[2], ARGV[2], n, seq)
