-- Redlock, one node: reset the TTL of every lock key, only if all of them
-- still hold our token.
-- KEYS lock keys; ARGV[1] token, ARGV[2] ttl ms. Returns 1 or 0.
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('pexpire', KEYS[i], ARGV[2])
end
return 1
