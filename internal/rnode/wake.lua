-- Wake the longest waiter of a key that is free: the second half of a
-- release through DELEX (Redis 8.4), pipelined after it.
-- KEYS[1] lock key, KEYS[2] its waiter queue. Returns 1 when it woke one.
if redis.call('exists', KEYS[1]) == 1 then return 0 end
local head = redis.call('zpopmin', KEYS[2])
if not head[1] then return 0 end
redis.call('publish', 'dlock:wake:' .. head[1], KEYS[1])
return 1
