-- The reaper's look at a batch of indexed refs.
-- KEYS[1] = P:inboxes
-- ARGV[1..5] = the per-ref key prefixes (Keys.per_ref): inbox, lock, backoff, parked,
--              delivery
-- ARGV[6..] = refs
-- Drops the refs whose inbox is empty from the index (checked here, so a delivery
-- appended meanwhile keeps its ref); returns {dropped, {{ref, lock token or '', held},
-- ...}} for the others.
local INBOX, LOCK, BACKOFF, PARKED = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out, dropped = {}, 0
for i = 6, #ARGV do
  local ref = ARGV[i]
  if redis.call('LLEN', INBOX .. ref) == 0 then
    redis.call('SREM', KEYS[1], ref)
    dropped = dropped + 1
  else
    local lock = redis.call('GET', LOCK .. ref) or ''
    local held = redis.call('EXISTS', PARKED .. ref, BACKOFF .. ref)
    table.insert(out, {ref, lock, held})
  end
end
return {dropped, out}
