-- Reset the TTL of the lock keys only if all of them still hold our token
-- (pre-8.4 SET IFEQ).
-- KEYS: m lock keys, then their m fence counters when a fence is given,
--   then their m holder keys when a holder record is given, then (a
--   semaphore's permit) its limit record, whose TTL is raised to the ttl
--   if below.
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the lock's fence (0: none),
--   ARGV[4] counter ttl ms (with a fence), ARGV[5] the holder record.
-- Returns 1 when extended, else 0. Given a fence, the counters are raised to
-- it, as release.lua does; given a holder record, it is written again
-- beside each key with the ttl.
local token, fence, rec = ARGV[1], tonumber(ARGV[3]), ARGV[5]
local k = 1 -- keys per lock key
if fence > 0 then k = k + 1 end
if rec then k = k + 1 end
local m = math.floor(#KEYS / k)
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
if rec then
  for i = 1, m do
    redis.pcall('set', KEYS[(k - 1) * m + i], rec, 'px', ARGV[2])
  end
end
local limit = KEYS[k * m + 1]
if fence > 0 and limit and redis.call('pttl', limit) < tonumber(ARGV[2]) then
  redis.call('pexpire', limit, ARGV[2])
end
return 1
