-- Save a work item's state record, fenced (fence.lua); returns {'ok', 1} or fence()'s
-- reply.
-- KEYS[1] P:lock:REF   KEYS[2] P:fence:REF   KEYS[3] P:state:REF   KEYS[4] P:effects:REF
-- KEYS[5] P:events:REF   KEYS[6] P:event-types:REF   KEYS[7] P:state-due
-- ARGV[1] lock token   ARGV[2] writer   ARGV[3] write number   ARGV[4] the state (JSON)
-- ARGV[5] retention: '' keep the log, 'persist' keep it for ever, else seconds it is kept
--         (counted from the first save that set them: EXPIRE NX)
-- ARGV[6] the ref's score in the sweep's index; '' removes it (it no longer waits)
-- ARGV[7] the ref
-- ARGV[8] '1': replace the outbox with ARGV[9..] (effect id / JSON record pairs);
--         'effect': write only the one pair ARGV[9], ARGV[10] into it (no state record)
local n = tonumber(ARGV[3])
local refused = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], n)
if refused then
  return refused
end
if ARGV[8] == 'effect' then
  redis.call('HSET', KEYS[4], ARGV[9], ARGV[10])
  return fenced(KEYS[2], ARGV[2], n, 1)
end
redis.call('SET', KEYS[3], ARGV[4])
if ARGV[6] == '' then
  redis.call('ZREM', KEYS[7], ARGV[7])
else
  redis.call('ZADD', KEYS[7], ARGV[6], ARGV[7])
end
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[4])
  if #ARGV > 8 then
    redis.call('HSET', KEYS[4], unpack(ARGV, 9))
  end
end
if ARGV[5] == 'persist' then
  redis.call('PERSIST', KEYS[5])
  redis.call('PERSIST', KEYS[6])
elseif ARGV[5] ~= '' then
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[5]), 'NX')
  redis.call('EXPIRE', KEYS[6], tonumber(ARGV[5]), 'NX')
end
return fenced(KEYS[2], ARGV[2], n, 1)
