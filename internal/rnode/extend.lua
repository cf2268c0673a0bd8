-- Reset the TTL of the lock keys only if all of them still hold our token
-- (pre-8.4 SET IFEQ).
-- KEYS: m lock keys, then their m fence counters when a fence is given,
--   then (a semaphore's permit) its limit record, whose TTL is raised to
--   the ttl if below.
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the lock's fence (0: none),
--   ARGV[4] counter ttl ms (with a fence).
-- Returns 1 when extended, else 0. Given a fence, the counters are raised to
-- it, as release.lua does.
local token, fence = ARGV[1], tonumber(ARGV[3])
local m = #KEYS
if fence > 0 then m = math.floor(#KEYS / 2) end
for i = 1, m do
  if redis.call('get', KEYS[i]) ~= token then
    return 0
  end
end
if fence > 0 then
  for i = 1, m do
    local c = tonumber(redis.call('get', KEYS[m + i]) or '0')
    if c < fence then
      redis.call('set', KEYS[m + i], ARGV[3], 'px', ARGV[4])
    else
      redis.call('pexpire', KEYS[m + i], ARGV[4])
    end
  end
end
for i = 1, m do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
local rec = KEYS[2 * m + 1]
if fence > 0 and rec and redis.call('pttl', rec) < tonumber(ARGV[2]) then
  redis.call('pexpire', rec, ARGV[2])
end
return 1
