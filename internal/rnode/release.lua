-- Delete the lock keys that still hold our token, and wake the longest
-- waiter of each (pre-8.4 DELEX IFEQ, plus the wake-up).
-- KEYS: m lock keys, then their m fence counters when a fence is given,
--   then (optional) their m waiter queues, then their m holder keys when a
--   holder record is given.
-- ARGV[1] token, and optionally ARGV[2] m (1), ARGV[3] the lock's fence (0:
--   none), ARGV[4] counter ttl ms (with a fence), ARGV[5] what to announce
--   in place of the key (a semaphore's permits: the semaphore, whose queue
--   the keys share; '': the key), ARGV[6] the holder record, deleted where
--   it is still this one (a later holder may have written its own).
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
local rec, nq = ARGV[6], #KEYS - q0 -- nq: the queues given
if rec then nq = nq - m end
local announce = ARGV[5]
if announce == '' then announce = nil end
local n, woken = 0, 0
for i = 1, m do
  if redis.call('get', KEYS[i]) == token then
    n = n + redis.call('del', KEYS[i])
    if i <= nq then
      local head = redis.call('zpopmin', KEYS[q0 + i])
      if head[1] then
        redis.call('publish', 'dlock:wake:' .. head[1], announce or KEYS[i])
        woken = woken + 1
      end
    end
  end
end
-- The holder records, last: an error reply there (the record is
-- informational only) leaves the release as it is.
for i = 1, rec and m or 0 do
  local h = KEYS[#KEYS - m + i]
  if redis.pcall('get', h) == rec then redis.pcall('del', h) end
end
if woken == 0 then return n end
return {n, woken}
