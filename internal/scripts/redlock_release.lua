-- Redlock, one node: delete every lock key that still holds our token.
-- KEYS lock keys [, then their waiter queues]; ARGV[1] token [, ARGV[2] the
-- number of lock keys when queues follow].
-- Returns the number of keys deleted. With queues, each deletion also pops
-- that key's queue head (a Locker id) and announces the release on the
-- Locker's channel, dlock:wake:<id> (see redlock/notify.go).
local m = #KEYS
if ARGV[2] then m = tonumber(ARGV[2]) end
local n = 0
for i = 1, m do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    n = n + redis.call('del', KEYS[i])
    local q = KEYS[m + i]
    if q then
      local head = redis.call('zpopmin', q)
      if head[1] then
        redis.call('publish', 'dlock:wake:' .. head[1], KEYS[i])
      end
    end
  end
end
return n
