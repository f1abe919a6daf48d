-- Store one CI result unless a newer one of the same name is stored; 1 stored, 0 not.
-- KEYS[1] P:ci:REPO:SHA (name -> conclusion)   KEYS[2] P:ci-order:REPO:SHA (name -> order)
-- ARGV[1] name   ARGV[2] conclusion   ARGV[3] order (a string that sorts by recency)
-- ARGV[4] TTL seconds
local stored = redis.call('HGET', KEYS[2], ARGV[1])
if stored and stored > ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
return 1
