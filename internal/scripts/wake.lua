-- The hand-off half of a native (DELEX) release, pipelined after it: if the
-- lock key is gone, hand it on as release.lua does.
-- KEYS[1] lock key, KEYS[2] waiter queue, KEYS[3] queue state, KEYS[4] fence
-- counter
-- ARGV[1] '1' when the hand-off may grant the lock directly (release.lua)
-- Returns 1 when it woke the head, 2 when it deferred it, 0 otherwise.
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if not head then
  return 0
end
if redis.replicate_commands then redis.replicate_commands() end -- see release.lua
local FENCE = ARGV[1] == '1' and KEYS[4] or nil
-- @queue.lua
return freed(KEYS[2], KEYS[3], KEYS[1], head)
