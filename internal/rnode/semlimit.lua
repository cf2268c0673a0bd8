-- Change the limit recorded for a semaphore whose permits are held.
-- KEYS[1] the limit record, then n slot keys (slots 0 to n-1), n at least
--   the record's span. ARGV[1] the new limit.
-- Returns {status, span}: 1 recorded, 0 no permit held (nothing to change:
-- the next grant records its own limit), 4 more slots to look at (call
-- again with span of them).
local n = #KEYS - 1
local rec = redis.call('hmget', KEYS[1], 'limit', 'span')
local span = tonumber(rec[2]) or 0
if rec[1] and span > n then return {4, span} end
local top = 0
for i = 1, n do
  if redis.call('exists', KEYS[1 + i]) == 1 then top = i end
end
if top == 0 then return {0, 0} end
local limit = tonumber(ARGV[1])
redis.call('hset', KEYS[1], 'limit', limit, 'span', math.max(limit, top))
return {1, math.max(limit, top)}
