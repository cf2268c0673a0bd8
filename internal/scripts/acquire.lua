-- Take a lock and issue its fence in one atomic step.
-- KEYS[1] lock key, KEYS[2] fence counter key [, KEYS[3] redislock's
-- waiter queue state] (all in one Cluster slot)
-- ARGV[1] token, ARGV[2] ttl in ms [, ARGV[3] the caller's Locker id]
-- Returns the fence (> 0) when the lock is ours; 0 when another owner holds
-- it; -1 when another owner holds it with no expiry (set by hand?); -2 when
-- it is free but reserved for another Locker's woken waiter (see queue.lua).
local S = KEYS[3]
local s = S and redis.call('hmget', S, 'r', 'u')
local v
if s and s[1] then
  -- The lock may be reserved for a woken waiter.
  v = redis.call('get', KEYS[1])
  if not v then
    if s[1] ~= ARGV[3] then
      if redis.replicate_commands then redis.replicate_commands() end -- see queue.lua
      local t = redis.call('time')
      if tonumber(s[2]) > t[1] * 1000000 + t[2] then
        redis.call('hset', S, 'b', '1') -- a newcomer refused: see queue.lua
        return -2
      end
    end
    redis.call('hdel', S, 'r', 'u')
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
    return redis.call('incr', KEYS[2])
  end
elseif redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  -- Nothing reserved, and the lock was free: the usual case.
  return redis.call('incr', KEYS[2])
else
  v = redis.call('get', KEYS[1])
end
if v == ARGV[1] then
  -- Our own earlier attempt landed (its reply was lost): it is ours, and
  -- the counter still holds the fence that attempt issued.
  redis.call('pexpire', KEYS[1], ARGV[2])
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
if redis.call('pttl', KEYS[1]) == -1 then
  return -1
end
return 0
