-- Take a lock and issue its fence in one atomic step.
-- KEYS[1] lock key, KEYS[2] fence counter key (both in one Cluster slot)
-- ARGV[1] token, ARGV[2] ttl in ms
-- Returns the fence (> 0) when the lock is ours; 0 when another owner holds
-- it; -1 when another owner holds it with no expiry (set by hand?); -2 when
-- it is reserved for a woken waiter: redislock's release then left
-- "dlock:reserved:<Locker id>" in the key for a short while (queue.lua).
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  -- The lock was free: the usual case.
  return redis.call('incr', KEYS[2])
end
local v = redis.call('get', KEYS[1])
if v == ARGV[1] then
  -- Our own earlier attempt landed (its reply was lost): it is ours, and
  -- the counter still holds the fence that attempt issued.
  redis.call('pexpire', KEYS[1], ARGV[2])
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
if string.sub(v, 1, 15) == 'dlock:reserved:' then
  return -2
end
if redis.call('pttl', KEYS[1]) == -1 then
  return -1
end
return 0
