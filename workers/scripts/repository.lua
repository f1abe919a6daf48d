-- Note a repository's id and current full name; return {key, previous name}.
-- KEYS[1] P:repository:ID   KEYS[2] P:repository-name:NAME   KEYS[3] P:repository-key:NAME
-- ARGV[1] the id   ARGV[2] the full name   ARGV[3] the installation id ("" for none)
-- The key (the OWNER/REPO of its work item refs) is fixed the first time the id is seen:
-- the name then, unless another repository's refs already use that name (a repository
-- created under a renamed one's former name): then the name with ".<id>" appended.
local key = redis.call('HGET', KEYS[1], 'key')
if not key then
  local holder = redis.call('GET', KEYS[3])
  if holder and holder ~= ARGV[1] then
    key = ARGV[2] .. '.' .. ARGV[1]
  else
    key = ARGV[2]
    redis.call('SET', KEYS[3], ARGV[1])
  end
  redis.call('HSET', KEYS[1], 'key', key)
end
local previous = redis.call('HGET', KEYS[1], 'name')
if previous ~= ARGV[2] then
  redis.call('HSET', KEYS[1], 'name', ARGV[2])
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'installation', ARGV[3])
end
return {key, previous or false}
