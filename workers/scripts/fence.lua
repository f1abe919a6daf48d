-- The fence of a work item's writes, written at the top of every script that changes
-- a work item's state or log (RedisStateStore loads it in front of them).
-- lock: P:lock:REF   fence: P:fence:REF (hash: writer, n, reply)
-- token: the lock token the writer holds ('' = an operator's write, under no lock)
-- writer: who writes (the token, or the operator's own id)   n: the writer's write number
-- Returns nil when the write may go ahead, else the script's reply: {'lost'} (the lock
-- is not the writer's: another worker took the work item over), {'done', reply} (a
-- copy of the writer's last write, already applied: a retry after a lost answer) or
-- {'stale'} (older than a write of the same writer applied already: a late copy).
local function fence(lock, fence_key, token, writer, n)
  if token ~= '' and redis.call('GET', lock) ~= token then
    return {'lost'}
  end
  local last = redis.call('HMGET', fence_key, 'writer', 'n', 'reply')
  if last[1] == writer then
    local seen = tonumber(last[2])
    if seen == n then
      return {'done', last[3] or ''}
    elseif seen > n then
      return {'stale'}
    end
  end
  return nil
end
-- Note the write applied (what a copy of it then gets back).
local function fenced(fence_key, writer, n, reply)
  redis.call('HSET', fence_key, 'writer', writer, 'n', n, 'reply', reply)
  return {'ok', reply}
end
