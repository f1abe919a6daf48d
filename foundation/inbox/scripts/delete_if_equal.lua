-- Delete KEYS[1] only if it still holds ARGV[1] (a lock token, a wake-up job id).
-- Returns 1 when deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
