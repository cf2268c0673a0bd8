-- The waiter queue of a redislock lock key and its hand-off policy:
-- functions shared by release.lua, acquire_waiting.lua, wake.lua and
-- leave.lua, which scripts.go splices in where they say "-- @queue.lua",
-- after their common paths have returned (defining the functions costs
-- each run). The design and the argument for it are in
-- redislock/notify.go.
--
-- Q, a sorted set: the ids of the Lockers waiting for the key, scored by
-- arrival.
-- S, a hash, the queue's state:
--   h, t  the Locker at Q's head and since when (server time, µs);
--   d     '1' once h was told to retry by itself (deferred);
--   b     '1' when a waiting attempt of a Locker not in the queue
--         (typically the releaser coming back at once) was refused while
--         the lock was reserved, or right after that Locker's own release
--         of a short hold: the lock is being re-taken at once;
--   R, T  the waiters' policy, in µs: how long a woken waiter's reservation
--         lasts, and how long the head lets a holder re-take the lock.
-- S expires a minute after it was last written, as Q does after its last
-- waiter came by. Neither ever grants a lock: the lock key alone does.
--
-- S also holds each queued Locker's registration, g<id> and l<id>: the
-- token and TTL of its last refused waiting attempt, for a direct grant.
--
-- A reservation lives in the lock key itself: a release that wakes the
-- head leaves RESERVED .. <its Locker id> there for R. Every SET NX is
-- refused meanwhile, also a node-redlock or redsync client's; only the
-- woken Locker's waiting attempt replaces it with a token.

local RESERVED = 'dlock:reserved:'

local function now_us()
  local t = redis.call('time')
  return t[1] * 1000000 + t[2]
end

local function touch(S)
  redis.call('pexpire', S, 60000)
end

-- new_head records Q's head, if any, as the head from now.
local function new_head(Q, S, now)
  local h = redis.call('zrange', Q, 0, 0)[1]
  if h then
    redis.call('hset', S, 'h', h, 't', now, 'd', '0')
    touch(S)
  else
    redis.call('hdel', S, 'h', 't', 'd')
  end
end

-- policy returns the queue's reservation R and hand-off threshold T (µs)
-- from S's fields R and T, or the defaults where the waiters wrote none.
local function policy(R, T)
  return tonumber(R) or 500000, tonumber(T) or 3000
end

-- wake pops Q's head and hands the free lock to it. Given FENCE (the fence
-- counter: the including script allows direct grants), a head that
-- registered its waiting attempt's token and TTL (acquire_waiting.lua)
-- gets the lock itself: the key is set to that token, a fence is drawn, and
-- the head's Locker is told "key\1token\1fence\1ttl". If no Locker
-- listens on its channel (it is gone), the key is deleted again and the
-- next head is tried. Otherwise, or without FENCE, the lock is reserved for
-- the head for R µs and it is told the key, to come and take it.
local function wake(Q, S, lock, head, now, R)
  while head do
    redis.call('zpopmin', Q)
    local g = redis.call('hmget', S, 'g' .. head, 'l' .. head)
    redis.call('hdel', S, 'g' .. head, 'l' .. head)
    local h = redis.call('zrange', Q, 0, 0)[1]
    if h then
      redis.call('hset', S, 'b', '0', 'h', h, 't', now, 'd', '0')
    else
      redis.call('hset', S, 'b', '0')
      redis.call('hdel', S, 'h', 't', 'd')
    end
    touch(S)
    if not (FENCE and g[1] and g[2]) then
      redis.call('set', lock, RESERVED .. head, 'px', math.max(1, math.ceil(R / 1000)))
      redis.call('publish', 'dlock:wake:' .. head, lock)
      return
    end
    redis.call('set', lock, g[1], 'px', g[2])
    local f = redis.call('incr', FENCE)
    if redis.call('publish', 'dlock:wake:' .. head, lock .. '\1' .. g[1] .. '\1' .. f .. '\1' .. g[2]) > 0 then
      return
    end
    redis.call('del', lock)
    head = h
  end
end

-- defer tells the head, once, to retry by itself in left µs (plus T, its
-- own slack), unless it was told already.
local function defer(S, lock, head, told, left)
  if told ~= '1' then
    redis.call('hset', S, 'd', '1')
    redis.call('publish', 'dlock:wake:' .. head, lock .. '\0' .. left)
  end
end

-- freed hands the lock on after a release that was not quiet: it wakes the
-- head, unless newcomers were refused since the last wake-up (the lock is
-- being re-taken at once, b) and the head has headed the queue for less
-- than T µs; then it defers the head instead. Returns 1 when the head was
-- woken, 2 when deferred.
local function freed(Q, S, lock, head)
  local s = redis.call('hmget', S, 'h', 't', 'd', 'b', 'R', 'T')
  local R, T = policy(s[5], s[6])
  local now = now_us()
  if s[1] == head and s[4] == '1' then
    local left = tonumber(s[2] or 0) + T - now
    if left > 0 then
      defer(S, lock, head, s[3], math.floor(math.min(left, T)))
      return 2
    end
  end
  wake(Q, S, lock, head, now, R)
  return 1
end
