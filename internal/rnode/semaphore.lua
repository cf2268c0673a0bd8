-- Grant one permit of a semaphore: the lowest free slot below the limit,
-- if fewer permits than the limit are held, with its fence. queue.lua's
-- functions come first.
-- KEYS[1] the limit record (a hash: limit, span), KEYS[2] the waiter queue,
--   then n slot keys (slots 0 to n-1), then their n fence counters. n is
--   at least the limit and the record's span (the slots that may be held:
--   more than the limit while holders above a shrunk limit finish).
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] counter ttl ms, ARGV[4] the
--   limit, and for a waiting attempt ARGV[5..9] as acquire.lua's ARGV[5..9]
--   (Locker id, earlier place, stay queued, queue ttl ms, yield; '' when
--   ARGV[10] follows and the attempt does not queue). ARGV[10] (Redlock)
--   the one slot to try, from 0 ('' or absent: any): it is granted only if
--   free, and nothing is granted while a slot at or above the limit is held
--   (holders above a shrunk limit finishing).
-- Returns {status, x, expiry, place, slot}: status 1 granted (x the fence,
-- slot the slot), 0 every permit held (x the tried slot's token if it is
-- held, else ''; expiry: the PTTL of the permit that expires first, when
-- the caller heads the queue, else -1), 2 free but left to the queue's
-- head (ARGV[9]), 3 a limit conflict (x the recorded limit), 4 more slots
-- to look at (x the span: call again with that many).
--
-- The record counts only while a permit is held: its TTL is kept at or
-- above every permit's (here and by extend.lua), and with no slot held it
-- is void and rewritten. All keys share the slot keys' hash tag.
local n = math.floor((#KEYS - 2) / 2)
local limit = tonumber(ARGV[4])
local queue = KEYS[2]
if (ARGV[5] or '') == '' then queue = nil end -- the attempt does not wait

local rec = redis.call('hmget', KEYS[1], 'limit', 'span')
local recorded, span = tonumber(rec[1]), tonumber(rec[2]) or 0
if recorded and span > n then return {4, span, -1, 0, -1} end

local one = tonumber(ARGV[10]) -- the one slot to try, 0-based, or nil
if one then one = one + 1 end
local held, free, top, soonest = 0, nil, 0, -1
for i = 1, n do
  local pttl = redis.call('pttl', KEYS[2 + i])
  if pttl == -2 then
    if not free and i <= limit and (not one or i == one) then free = i end
  else
    held, top = held + 1, i
    if pttl >= 0 and (soonest < 0 or pttl < soonest) then soonest = pttl end
  end
end
if held == 0 then recorded = nil end
if recorded and recorded ~= limit then return {3, recorded, -1, 0, -1} end

if one and top > limit then free = nil end
if held >= limit or not free then
  local place = queued(queue, false)
  local expiry = -1
  if place > 0 and heads(queue) then expiry = soonest end
  local holder = ''
  if one and one <= n then holder = redis.call('get', KEYS[2 + one]) or '' end
  return {0, holder, expiry, place, -1}
end
if ARGV[9] == '1' then
  local place = queued(queue, false)
  local expiry = -1
  if place > 0 and heads(queue) then expiry = 0 end
  return {2, '', expiry, place, -1}
end

-- The fence: above the slot's counter and at least the server's clock in
-- µs, as acquire.lua draws it.
local t = redis.call('time')
local fence = tonumber(t[1] .. string.sub('00000' .. t[2], -6))
local c = tonumber(redis.call('get', KEYS[2 + n + free]) or '0')
if c >= fence then fence = c + 1 end
local f = string.format('%d', fence)
redis.call('set', KEYS[2 + n + free], f, 'px', ARGV[3])
redis.call('set', KEYS[2 + free], ARGV[1], 'px', ARGV[2])

redis.call('hset', KEYS[1], 'limit', limit, 'span', math.max(limit, top, free))
local ttl = tonumber(ARGV[2])
if redis.call('pttl', KEYS[1]) < ttl then redis.call('pexpire', KEYS[1], ttl) end
return {1, fence, -1, queued(queue, true), free - 1}
