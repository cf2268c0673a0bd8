-- The waiter queue's functions, put in front of acquire.lua and
-- semaphore.lua (scripts.go joins them), whose ARGV[5..8] they read:
-- ARGV[5] the Locker's id, ARGV[6] its earlier place in the queue (0:
-- none), ARGV[7] '1' to stay queued after a grant, ARGV[8] the queue's ttl
-- ms.

-- queued puts the caller in queue (keeping an earlier place) or, after a
-- grant, takes it out or moves it to the tail; it returns the place, 0
-- for no queue (nil: the attempt does not wait). Queue errors are ignored:
-- the queue only decides whom a release wakes.
local function queued(queue, granted)
  if not queue then return 0 end
  local id, place = ARGV[5], tonumber(ARGV[6])
  if granted and ARGV[7] ~= '1' then
    redis.pcall('zrem', queue, id)
    return 0
  end
  if granted or place == 0 then
    local last = redis.pcall('zrevrange', queue, 0, 0, 'withscores')
    place = 1
    if type(last) == 'table' and last[2] then place = tonumber(last[2]) + 1 end
  end
  if granted then
    redis.pcall('zadd', queue, place, id) -- to the tail, behind the others
  else
    redis.pcall('zadd', queue, 'nx', place, id) -- keeps a place it has
  end
  redis.pcall('pexpire', queue, ARGV[8])
  return tonumber(redis.pcall('zscore', queue, id)) or 0
end

-- heads says whether the caller heads queue.
local function heads(queue)
  return redis.pcall('zrange', queue, 0, 0)[1] == ARGV[5]
end

