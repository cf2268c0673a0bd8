-- The acquire of a redislock Locker that has a waiter on the key: the grant
-- of acquire.lua plus the waiter queue (queue.lua).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] queue state, KEYS[4]
-- waiter queue
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] Locker id, ARGV[4] the Locker's
-- earlier place in the queue (0 = none), ARGV[5] '1' when more of the
-- Locker's waiters wait after a win, ARGV[6] queue ttl ms, ARGV[7] hand-off
-- threshold T µs, ARGV[8] reservation R µs, ARGV[9] '1' when a refused
-- attempt registers its token and TTL for a direct grant (queue.lua's wake),
-- ARGV[10] '1' when the Locker comes back at once after releasing a short
-- hold on the key (a loop over the lock)
-- Returns {fence (> 0), 0 busy, -1 busy without expiry or -2 reserved for
-- another Locker's woken waiter; the Locker's place in the queue now, 0
-- when not queued; quiet; expires}. quiet > 0 (µs) when a won lock was
-- taken by barging while the head has headed the queue for less than T: a
-- release within quiet µs need not hand the lock on (the head has been told
-- to retry by itself), so it can skip the queue. expires >= 0 (ms) when the
-- attempt was refused by a held or reserved lock and the Locker heads the
-- queue: the lock key expires then, and nobody announces an expiry (a
-- holder or a woken waiter that crashed), so the head retries then by
-- itself; -1 otherwise.
local S, Q, id = KEYS[3], KEYS[4], ARGV[3]
local place = tonumber(ARGV[4])
-- The clock may be read before writes: replicate effects, not the script
-- (the default from Redis 5, the only way from 7; this asks for it where a
-- 5 or 6 server is configured otherwise).
if redis.replicate_commands then redis.replicate_commands() end

local s = redis.call('hmget', S, 'h', 't', 'd', 'b')
local now
if s[1] then
  local clock = redis.call('time')
  now = clock[1] * 1000000 + clock[2]
end
-- A free lock is taken; one reserved for this Locker (queue.lua's wake
-- left its id in the key) is taken over; any other value refuses.
local fence, mine, v
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  fence = true
else
  v = redis.call('get', KEYS[1])
  if v == ARGV[1] then
    -- Ours already: a release granted it to this token directly (its
    -- announcement has not been seen), or an earlier attempt landed and
    -- its reply was lost. The counter holds a fence drawn since the grant
    -- and before any later one.
    redis.call('pexpire', KEYS[1], ARGV[2])
    fence, mine = tonumber(redis.call('get', KEYS[2]) or '0'), true
  else
    mine = v == 'dlock:reserved:' .. id
    if mine then
      redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
      fence = true
    end
  end
end
local reserved = not fence and string.sub(v, 1, 15) == 'dlock:reserved:'
if fence then
  if fence == true then fence = redis.call('incr', KEYS[2]) end
  -- A registration for a direct grant is spent (queue.lua's wake).
  redis.call('hdel', S, 'g' .. id, 'l' .. id)
  -- Barging: taken over another Locker at the head, or on a turn (the
  -- reservation) while newcomers were refused. Then, while the head is
  -- young, the holder may re-take the lock at once: the head is told to
  -- retry by itself, once, and the release need not wake it.
  local quiet = 0
  if s[1] and s[1] ~= id and ((not mine) or s[4] == '1') then
    local T = tonumber(ARGV[7])
    local left = tonumber(s[2] or 0) + T - now
    if left > 0 then
      quiet = math.floor(math.min(left, T))
      if s[3] ~= '1' then -- as queue.lua's defer, which is not defined yet
        redis.call('hset', S, 'd', '1')
        redis.call('publish', 'dlock:wake:' .. s[1], KEYS[1] .. '\0' .. quiet)
      end
    end
  end
  if (place == 0 or mine) and ARGV[5] ~= '1' then
    -- Not in the queue (a newcomer, or woken: popped): done.
    return {fence, 0, quiet, -1}
  end
  -- More to do, with the queue's functions below.
  place = {place, quiet}
end
local FENCE = nil -- no wake here (queue.lua)
-- @queue.lua

-- enqueue puts the Locker at place, or at the back when place is 0, and
-- returns its place and whether it heads the queue. A Locker that arrives
-- at an empty queue heads it from now; one that comes back to its old place
-- at the front (it was woken but lost its turn) counts as having been the
-- head long enough. Each new entry records the waiters' policy.
local function enqueue(place)
  local fresh = place == 0
  if fresh then
    local last = redis.call('zrevrange', Q, 0, 0, 'withscores')
    place = 1
    if last[2] then place = tonumber(last[2]) + 1 end
  end
  local added = redis.call('zadd', Q, 'nx', place, id)
  redis.call('pexpire', Q, ARGV[6])
  local head = s[1] == id
  if added == 1 then
    if redis.call('zrange', Q, 0, 0)[1] == id then
      head = true
      local since = 0
      if fresh then since = now_us() end
      redis.call('hset', S, 'h', id, 't', since, 'd', '0', 'R', ARGV[8], 'T', ARGV[7])
    else
      redis.call('hset', S, 'R', ARGV[8], 'T', ARGV[7])
    end
    touch(S)
  end
  return tonumber(redis.call('zscore', Q, id)), head
end

if fence then
  -- Won, by a Locker that was queued or has more waiters (a woken one was
  -- popped already).
  local was, quiet = place[1], place[2]
  if was ~= 0 and redis.call('zrem', Q, id) == 1 and s[1] == id then
    new_head(Q, S, now_us())
  end
  if ARGV[5] == '1' then
    return {fence, (enqueue(0)), quiet, -1}
  end
  return {fence, 0, quiet, -1}
end
-- Refused: queued, and registered for a direct grant if asked.
if ARGV[9] == '1' then redis.call('hset', S, 'g' .. id, ARGV[1], 'l' .. id, ARGV[2]) end
-- A newcomer refused by a reservation, or one that came back at once after
-- its own short hold (the woken waiter was quicker): the lock is being
-- re-taken at once (queue.lua's b).
if place == 0 and (reserved or ARGV[10] == '1') then redis.call('hset', S, 'b', '1') end
if reserved then
  -- Reserved for another Locker's woken waiter, which may have crashed:
  -- the head learns when the reservation lapses.
  local at, head = enqueue(place)
  local expires = -1
  if head then expires = redis.call('pttl', KEYS[1]) end
  return {-2, at, 0, expires}
end
local busy, expires = 0, redis.call('pttl', KEYS[1])
if expires == -1 then busy = -1 end
local at, head = enqueue(place)
if not head then expires = -1 end
return {busy, at, 0, expires}
