-- Delete the lock only if it still holds our token (pre-8.4 DELEX IFEQ).
-- KEYS[1] lock key; ARGV[1] token. Returns 1 if deleted, 0 otherwise.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
