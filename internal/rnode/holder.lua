-- Publish who holds a lock beside each of its keys that still holds the
-- caller's token (an election's term record, once its fence is known).
-- KEYS: m lock keys, then their m holder keys. ARGV[1] token, ARGV[2] the
-- holder record (JSON), ARGV[3] ttl ms. Returns how many it wrote.
local m, n = #KEYS / 2, 0
for i = 1, m do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('set', KEYS[m + i], ARGV[2], 'px', ARGV[3])
    n = n + 1
  end
end
return n
