-- List a ref as ready (if its inbox holds deliveries and it is not listed already).
-- KEYS[1] = P:ready  KEYS[2] = P:inboxes  KEYS[3] = P:inbox:REF  KEYS[4] = P:lock:REF
-- KEYS[5] = P:backoff:REF  KEYS[6] = P:parked:REF
-- ARGV[1] = REF   ARGV[2] = '1': only if its lock is free and it is not held
-- ARGV[3] = a delivery id to put in the inbox first unless it is there ('' = none)
-- ARGV[4] = '1': put it at the head (else the tail)
-- Returns 1 when REF was listed now, else 0.
if ARGV[3] ~= '' and not redis.call('LPOS', KEYS[3], ARGV[3]) then
  if ARGV[4] == '1' then
    redis.call('LPUSH', KEYS[3], ARGV[3])
  else
    redis.call('RPUSH', KEYS[3], ARGV[3])
  end
end
if redis.call('LLEN', KEYS[3]) == 0 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then
  return 0
end
if redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1
