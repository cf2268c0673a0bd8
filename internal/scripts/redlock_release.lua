-- Redlock, one node: delete every lock key that still holds our token.
-- KEYS lock keys; ARGV[1] token. Returns the number of keys deleted.
local n = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    n = n + redis.call('del', KEYS[i])
  end
end
return n
