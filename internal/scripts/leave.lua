-- A redislock Locker with no waiter left for the key leaves its queue. If
-- the free lock is reserved for it (it was woken but nobody came), the
-- reservation passes to the next head at once, or ends (queue.lua).
-- KEYS[1] lock key, KEYS[2] waiter queue, KEYS[3] queue state
-- ARGV[1] Locker id
-- Returns 1 when it woke the next head, else 0.
if redis.replicate_commands then redis.replicate_commands() end -- see release.lua
-- @queue.lua
local Q, S, id = KEYS[2], KEYS[3], ARGV[1]
local removed = redis.call('zrem', Q, id)
if redis.call('get', KEYS[1]) == RESERVED .. id then
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
