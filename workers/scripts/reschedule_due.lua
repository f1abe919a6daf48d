-- Move a ref's entry in the monitor sweep's index, unless a save changed it since the
-- sweep read it; returns 1 (moved or removed) or 0 (left as it is).
-- KEYS[1] P:state-due
-- ARGV[1] the ref   ARGV[2] the score the sweep read   ARGV[3] the new score, '' removes
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not current or tonumber(current) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
