-- A redislock Locker with no waiter left for the key leaves its queue. If
-- the free lock was reserved for it (it was woken but nobody came), the
-- reservation passes to the next head at once (queue.lua).
-- KEYS[1] lock key, KEYS[2] waiter queue, KEYS[3] queue state
-- ARGV[1] Locker id, ARGV[2] reservation µs
-- Returns 1 when it woke the next head, else 0.
if redis.replicate_commands then redis.replicate_commands() end -- see release.lua
-- @queue.lua
local Q, S, id = KEYS[2], KEYS[3], ARGV[1]
local removed = redis.call('zrem', Q, id)
local s = redis.call('hmget', S, 'h', 'r')
if s[2] == id then
  redis.call('hdel', S, 'r', 'u')
  if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('zrange', Q, 0, 0)[1]
    if head then
      wake(Q, S, KEYS[1], head, now_us(), tonumber(ARGV[2]))
      return 1
    end
  end
end
if removed == 1 and s[1] == id then
  new_head(Q, S, now_us())
end
return 0
