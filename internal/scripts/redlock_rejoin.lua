-- Redlock, one node: bring a node that lost its data back into the fence
-- majority (Locker.Rejoin, Locker.Reseed).
-- KEYS[1] node marker; KEYS[2..] counter keys
-- ARGV[1] the node's epoch as the caller read it; ARGV[2] mode:
--   "seed": raise each counter to ARGV[2+i] (set if greater) and tag it with
--           the epoch;
--   "promote": set the marker's trust to "all" and its floor to ARGV[3]
--           (a missing counter then counts as the floor).
-- Returns 1, or 0 when the node restarted or its epoch changed meanwhile.
local run = string.match(redis.call('info', 'server'), 'run_id:([^\r\n]*)') or ''
local mk = redis.call('hmget', KEYS[1], 'epoch', 'run')
if mk[1] ~= ARGV[1] or mk[2] ~= run then
  return 0
end
if ARGV[2] == 'seed' then
  for i = 2, #KEYS do
    local v = tonumber(ARGV[1 + i])
    local n = tonumber(redis.call('hget', KEYS[i], 'n') or '0')
    if n < v then
      redis.call('hset', KEYS[i], 'n', ARGV[1 + i])
    end
    redis.call('hset', KEYS[i], 'e', ARGV[1])
  end
else
  redis.call('hset', KEYS[1], 'trust', 'all', 'floor', ARGV[3])
end
return 1
