-- A redislock Locker with no waiter left for the key leaves its queue. If
-- the lock is reserved for it, or was granted directly to a token it will
-- not use (ARGV[2], ...), the lock passes to the next head at once, or is
-- freed (queue.lua).
-- KEYS[1] lock key, KEYS[2] waiter queue, KEYS[3] queue state, KEYS[4]
-- fence counter
-- ARGV[1] Locker id, ARGV[2...] tokens of its that nobody will take
-- Returns 1 when it woke the next head, else 0.
if redis.replicate_commands then redis.replicate_commands() end -- see release.lua
local FENCE = KEYS[4]
-- @queue.lua
local Q, S, id = KEYS[2], KEYS[3], ARGV[1]
local removed = redis.call('zrem', Q, id)
redis.call('hdel', S, 'g' .. id, 'l' .. id)
local v = redis.call('get', KEYS[1])
local ours = v == RESERVED .. id
for i = 2, #ARGV do
  ours = ours or v == ARGV[i]
end
if ours then
  local head = redis.call('zrange', Q, 0, 0)[1]
  if head then
    wake(Q, S, KEYS[1], head, now_us(), policy(redis.call('hget', S, 'R')))
    return 1
  end
  redis.call('del', KEYS[1])
end
if removed == 1 and redis.call('hget', S, 'h') == id then
  new_head(Q, S, now_us())
end
return 0
