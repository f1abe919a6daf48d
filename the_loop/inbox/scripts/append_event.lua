-- Append one entry to a work item's event log and index it; returns its sequence number
-- (the list position, so RPUSH's answer).
-- KEYS[1] P:events:REF (list)   KEYS[2] P:event-types:REF (set)
-- KEYS[3] P:events-by:ID:REF (list of "SEQ ENVELOPE"), only for an entry a delivery caused
-- ARGV[1] the entry's JSON envelope   ARGV[2] its type   ARGV[3] TTL seconds of KEYS[3]
local seq = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
-- A done item's log expires; its index of types goes with it.
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if KEYS[3] then
  redis.call('RPUSH', KEYS[3], seq .. ' ' .. ARGV[1])
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[3]))
end
return seq
