-- Publish who holds a lock, only while it holds the caller's token.
-- KEYS[1] lock key, KEYS[2] its holder key. ARGV[1] token, ARGV[2] the
-- holder record (JSON), ARGV[3] ttl ms. Returns 1 when written.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('set', KEYS[2], ARGV[2], 'px', ARGV[3])
  return 1
end
return 0
