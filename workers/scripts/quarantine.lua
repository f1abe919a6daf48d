-- Move a work item's unreadable state record aside, fenced (fence.lua); returns
-- {'ok', 1} (moved), {'ok', 0} (there was none) or fence()'s reply. The ref leaves the
-- sweep's index with its record.
-- KEYS[1] P:lock:REF   KEYS[2] P:fence:REF   KEYS[3] P:state:REF
-- KEYS[4] P:state-corrupt:AT:REF   KEYS[5] P:state-due
-- ARGV[1] lock token   ARGV[2] writer   ARGV[3] write number   ARGV[4] the ref
local n = tonumber(ARGV[3])
local refused = fence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], n)
if refused then
  return refused
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  return fenced(KEYS[2], ARGV[2], n, 0)
end
redis.call('RENAME', KEYS[3], KEYS[4])
redis.call('ZREM', KEYS[5], ARGV[4])
return fenced(KEYS[2], ARGV[2], n, 1)
