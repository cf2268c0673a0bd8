-- Delete the lock keys that still hold our token, and wake the longest
-- waiter of each (pre-8.4 DELEX IFEQ, plus the wake-up).
-- KEYS: m lock keys, then their m fence counters when a fence is given,
--   then (optional) their m waiter queues.
-- ARGV[1] token, and optionally ARGV[2] m (1), ARGV[3] the lock's fence (0:
--   none), ARGV[4] counter ttl ms (with a fence), ARGV[5] what to announce
--   in place of the key (a semaphore's permits: the semaphore, whose queue
--   the keys share).
-- Returns the number of keys deleted when it woke nobody (the common case,
-- kept to one number for speed), else {keys deleted, waiters woken}. Given
-- a fence, every counter is first
-- raised to it (Redlock: the nodes that drew lower fences learn the lock's).
-- A deleted key's queue head (a Locker id) is popped and told on its
-- channel, dlock:wake:<id>, that the key is free.
local token, m, fence = ARGV[1], tonumber(ARGV[2] or '1'), tonumber(ARGV[3] or '0')
local q0 = m
if fence > 0 then
  q0 = 2 * m
  for i = 1, m do
    local c = tonumber(redis.call('get', KEYS[m + i]) or '0')
    if c < fence then
      redis.call('set', KEYS[m + i], ARGV[3], 'px', ARGV[4])
    end
  end
end
local n, woken = 0, 0
for i = 1, m do
  if redis.call('get', KEYS[i]) == token then
    n = n + redis.call('del', KEYS[i])
    local q = KEYS[q0 + i]
    if q then
      local head = redis.call('zpopmin', q)
      if head[1] then
        redis.call('publish', 'dlock:wake:' .. head[1], ARGV[5] or KEYS[i])
        woken = woken + 1
      end
    end
  end
end
if woken == 0 then return n end
return {n, woken}
