-- The GitHub write throttle's reservation (integrations.throttle.WriteThrottle): GCRA
-- on Redis's clock, one "theoretical arrival time" per limit.
-- KEYS[1] = P:github:writes:BUCKET   the bucket's schedule (hash: tat1, tat2, ...)
-- ARGV[1] = longest acceptable wait, ms; then one (interval ms, tolerance ms) pair per
--           limit.
-- Returns {reserved (1/0), wait ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_wait = tonumber(ARGV[1])
local n = (#ARGV - 1) / 2
local slot = now
local tats = {}
for i = 1, n do
  local tat = tonumber(redis.call('HGET', KEYS[1], 'tat' .. i) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  local allowed = tat - tonumber(ARGV[2 * i + 1])
  if allowed > slot then slot = allowed end
end
local wait = slot - now
if wait > max_wait then return {0, wait} end
local horizon = 0
for i = 1, n do
  local tat = math.max(tats[i], slot) + tonumber(ARGV[2 * i])
  redis.call('HSET', KEYS[1], 'tat' .. i, tat)
  if tat - now > horizon then horizon = tat - now end
end
redis.call('PEXPIRE', KEYS[1], horizon + 1000)
return {1, wait}
