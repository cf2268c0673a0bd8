-- Delete the lock only if it still holds our token (pre-8.4 DELEX IFEQ).
-- KEYS[1] lock key [, KEYS[2] its waiter queue, KEYS[3] the queue's state,
-- KEYS[4] the fence counter]
-- ARGV[1] token [, ARGV[2] '1' when the hand-off may grant the lock to the
-- head directly (queue.lua's wake)]
-- Returns 1 if deleted, 0 otherwise. With the queue, a deletion also hands
-- the lock on to the queue's head (queue.lua's freed). A holder that took
-- the lock by barging while the head was young releases without the queue
-- (acquire_waiting.lua's quiet).
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
if not KEYS[2] or redis.call('exists', KEYS[2]) == 0 then
  return redis.call('del', KEYS[1])
end
-- The clock is read below, before more writes: replicate effects, not the
-- script (the default from Redis 5, the only way from 7; this asks for it
-- where a 5 or 6 server is configured otherwise).
if redis.replicate_commands then redis.replicate_commands() end
redis.call('del', KEYS[1])
local FENCE = ARGV[2] == '1' and KEYS[4] or nil
-- @queue.lua
freed(KEYS[2], KEYS[3], KEYS[1], redis.call('zrange', KEYS[2], 0, 0)[1])
return 1
