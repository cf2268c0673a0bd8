-- Fenced register. KEYS[1]: a hash with fields
--   fence   highest fence seen, decimal
--   holder  digest of the token that presented it
--   value   the guarded value (absent until the first write)
-- ARGV: op ("register" | "read" | "write" | "highest"), fence, holder, value.
-- Returns {0, highest, tie} when the fence is stale; otherwise {1} for
-- register and write, {1, 1, value} or {1, 0} for read, {1, highest} for
-- highest ("0" for an untouched key).
local key, op, fence, holder = KEYS[1], ARGV[1], ARGV[2], ARGV[3]

-- Fences are uint64 in decimal. Lua numbers are doubles and lose precision
-- above 2^53, so compare the strings: by length, then in 10-digit chunks
-- (exact as doubles, independent of the server's locale).
local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = 1, #a, 10 do
    local x, y = tonumber(string.sub(a, i, i + 9)), tonumber(string.sub(b, i, i + 9))
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end

local cur = redis.call('HMGET', key, 'fence', 'holder')
local highest, setter = cur[1], cur[2]
if highest and not string.match(highest, '^[1-9]%d*$') then
  return redis.error_reply('ERR fence guard ' .. key .. ' holds a malformed fence: ' .. highest)
end

if op == 'highest' then
  return {1, highest or '0'}
end

if highest then
  local c = cmp(fence, highest)
  if c < 0 or (c == 0 and holder ~= setter) then
    return {0, highest, c == 0 and 1 or 0}
  end
end

if op == 'write' then
  redis.call('HSET', key, 'fence', fence, 'holder', holder, 'value', ARGV[4])
  return {1}
end
redis.call('HSET', key, 'fence', fence, 'holder', holder)
if op == 'read' then
  local v = redis.call('HGET', key, 'value')
  if v then return {1, 1, v} end
  return {1, 0}
end
return {1}
