-- Take a lock on one or several keys (all or nothing) and draw its fence.
-- queue.lua's functions come first.
-- KEYS: m lock keys, then their m fence counters, then with a holder
--   record their m holder keys, then, for a waiting attempt on one key, its
--   waiter queue.
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] counter ttl ms, ARGV[4] clock
--   offset µs (0, or left out, but in tests), and for a waiting attempt: ARGV[5] the
--   Locker's id, ARGV[6] its earlier place in the queue (0: none), ARGV[7]
--   '1' to stay queued after a grant (the Locker has more waiters), ARGV[8]
--   the queue's ttl ms, ARGV[9] '1' to let the queue's head go first (the
--   Locker's own release just woke it); ARGV[10] (ARGV[5..9] '' if the
--   attempt does not wait) the holder record, written beside each key
--   granted, with the lock's ttl.
-- Returns the fence (a string of digits) for a grant on one key without a
-- queue, the common case; otherwise {status, fence or holder, expiry,
-- place}: status 1 granted (the fence), 0 busy or -1 busy with a key that
-- never expires (the holder's token), 2 free but left to the queue's head
-- (ARGV[9]); expiry is the busy key's PTTL (0 for status 2) when the
-- caller heads the queue, else -1; place is the caller's place in the queue (0: not queued).
--
-- An attempt that fails on an error reply (an ACL that denies dlock's keys,
-- a counter of the wrong type) leaves no lock behind: the common case undoes
-- its SET, and the general one checks and reads everything before it writes
-- and writes the lock keys last.
local rec = ARGV[10]
local k = 2 -- keys per lock key
if rec then k = 3 end
local m = math.floor(#KEYS / k)
local token = ARGV[1]
local queue = KEYS[k * m + 1]

-- holders writes the holder record beside the m lock keys. An error reply
-- there leaves the grant as it is: the record is informational only.
local function holders()
  if not rec then return end
  for i = 1, m do redis.pcall('set', KEYS[2 * m + i], rec, 'px', ARGV[2]) end
end

-- now returns the server's clock in µs as a string of digits (16 until the
-- year 2286, so two of them compare as strings).
local function now()
  local t = redis.call('time')
  local offset = ARGV[4] or '0'
  if offset == '0' then
    return t[1] .. string.sub('00000' .. t[2], -6)
  end
  return string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(offset))
end

-- The common case, one key and no queue: SET NX first (undone if the counter
-- fails), then the counter, with string work only. It exists for speed: it
-- costs the server less time than the general path (see bench/RESULTS.md,
-- "Figures once quoted in code comments").
if m == 1 and not queue then
  if redis.call('set', KEYS[1], token, 'nx', 'px', ARGV[2]) then
    local fence = now()
    local old = redis.pcall('set', KEYS[2], fence, 'px', ARGV[3], 'get')
    if type(old) == 'string' and (#old > #fence or #old == #fence and old >= fence) then
      -- The counter is ahead of the clock: one more than it.
      redis.pcall('set', KEYS[2], old, 'px', ARGV[3])
      old = redis.pcall('incr', KEYS[2])
      if type(old) == 'number' then fence = string.format('%d', old) end
    end
    if type(old) == 'table' and old.err then
      redis.call('del', KEYS[1])
      return old
    end
    holders()
    return fence
  end
end

for i = 1, m do
  local v = redis.call('get', KEYS[i])
  if v and v ~= token then
    local pttl = redis.call('pttl', KEYS[i])
    local status = 0
    if pttl == -1 then status = -1 end
    local place = queued(queue, false)
    local expiry = -1
    if place > 0 and heads(queue) then
      expiry = pttl
    end
    return {status, v, expiry, place}
  end
end

-- A Locker whose release just woke the queue's head lets it go first,
-- instead of taking the key again at once, and queues behind. The woken
-- head is no longer in the queue (the release popped it), so whoever heads
-- it now, this Locker included, does not matter.
if queue and ARGV[9] == '1' then
  local place = queued(queue, false)
  local expiry = -1
  if place > 0 and heads(queue) then
    expiry = 0 -- nobody else waits: nobody will wake the caller
  end
  return {2, '', expiry, place}
end

-- Free (or already ours: an earlier attempt with this token landed). The
-- fence is above every counter and at least the server's clock, so a
-- counter that was lost or expired comes back above the fences before it.
local fence = tonumber(now())
for i = 1, m do
  local c = tonumber(redis.call('get', KEYS[m + i]) or '0')
  if c >= fence then fence = c + 1 end
end
local f = string.format('%d', fence)
for i = 1, m do
  redis.call('set', KEYS[m + i], f, 'px', ARGV[3])
end
for i = 1, m do
  local ok = redis.pcall('set', KEYS[i], token, 'px', ARGV[2])
  if type(ok) == 'table' and ok.err then
    for j = 1, i - 1 do redis.pcall('del', KEYS[j]) end
    return ok
  end
end
holders()
return {1, fence, -1, queued(queue, true)}
