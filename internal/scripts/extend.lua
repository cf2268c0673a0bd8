-- Reset the lock's TTL only if it still holds our token (pre-8.4 SET IFEQ).
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl in ms. Returns 1 or 0.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
