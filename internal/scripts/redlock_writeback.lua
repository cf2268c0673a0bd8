-- Redlock, one node: raise the fence counters to the lock's fence (set if
-- greater) and mark them as written under the node's current epoch, but only
-- if the node is still the same incarnation and still holds every lock key
-- with our token.
-- KEYS[1] node marker; KEYS[2..m+1] lock keys; KEYS[m+2..2m+1] counter keys
-- ARGV[1] token, ARGV[2] fence, ARGV[3] "1" rule on / "0" off, ARGV[4] epoch
-- Returns 1 when written, 0 when the lock or the node's epoch changed.
local m = (#KEYS - 1) / 2
if ARGV[3] == '1' then
  local run = string.match(redis.call('info', 'server'), 'run_id:([^\r\n]*)') or ''
  local mk = redis.call('hmget', KEYS[1], 'epoch', 'run')
  if mk[1] ~= ARGV[4] or mk[2] ~= run then
    return 0
  end
end
for i = 1, m do
  if redis.call('get', KEYS[1 + i]) ~= ARGV[1] then
    return 0
  end
end
local fence = tonumber(ARGV[2])
for i = 1, m do
  local ck = KEYS[1 + m + i]
  local n = tonumber(redis.call('hget', ck, 'n') or '0')
  if n < fence then
    redis.call('hset', ck, 'n', ARGV[2])
  end
  if ARGV[3] == '1' then
    redis.call('hset', ck, 'e', ARGV[4])
  end
end
return 1
