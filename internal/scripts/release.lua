-- Delete the lock only if it still holds our token (pre-8.4 DELEX IFEQ).
-- KEYS[1] lock key [, KEYS[2] its waiter queue]; ARGV[1] token.
-- Returns 1 if deleted, 0 otherwise. With KEYS[2], a deletion also pops the
-- queue's head (a redislock Locker id) and announces the release on that
-- Locker's channel, dlock:wake:<id> (see redislock/notify.go).
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  if KEYS[2] then
    local head = redis.call('zpopmin', KEYS[2])
    if head[1] then
      redis.call('publish', 'dlock:wake:' .. head[1], KEYS[1])
    end
  end
  return 1
end
return 0
