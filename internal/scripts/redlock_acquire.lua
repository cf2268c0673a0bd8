-- Redlock, one node: take the lock on every key (all or nothing) and report
-- the node's fence counters, or (mode "read") only report the counters.
-- KEYS[1] node marker; KEYS[2..m+1] lock keys; KEYS[m+2..2m+1] counter keys
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] "1" amnesia rule on / "0" off,
-- ARGV[4] epoch to use if the marker must be renewed (random per attempt;
-- the run_id is appended, so it is this node's own), ARGV[5] "acquire"/"read"
-- Returns {status, run_id, epoch, marker state, trust, holder, n1, f1, ...}:
-- status 1 granted, 0 busy, -1 busy with a key that never expires, 2 read;
-- marker state "ok", "none" (no marker: restarted empty or never seen),
-- "reset" (marker from an earlier server process: renewed, trust "own"),
-- "off" (rule off); holder: the token that made the node refuse ("" when
-- granted); per key the counter n and a flag: 2 trusted and
-- incremented by this grant, 1 trusted, 0 untrusted.
local m = (#KEYS - 1) / 2
local run = run_id()
local rule = ARGV[3] == '1'

local epoch, trust, mstate, floor = '', '', 'off', '0'
if rule then
  local mk = redis.call('hmget', KEYS[1], 'epoch', 'run', 'trust', 'floor')
  if not mk[1] then
    mstate = 'none'
  elseif mk[2] ~= run then
    -- Restarted from a snapshot or an AOF that may have missed writes:
    -- its counters may be behind, so none of them is trusted any more.
    local fresh = ARGV[4] .. '.' .. run
    redis.call('hset', KEYS[1], 'epoch', fresh, 'run', run, 'trust', 'own')
    epoch, trust, mstate = fresh, 'own', 'reset'
  else
    epoch, trust, mstate = mk[1], mk[3], 'ok'
    floor = mk[4] or '0'
  end
end

local status = 2
local holder = ''
local fresh = {}
if ARGV[5] == 'acquire' and m == 1 then
  -- One key, the usual case: try it at once.
  status = 1
  if redis.call('set', KEYS[2], ARGV[1], 'nx', 'px', ARGV[2]) then
    fresh[1] = true
  else
    local v = redis.call('get', KEYS[2])
    if v == ARGV[1] then
      -- Already ours (an earlier attempt with this token landed).
      redis.call('pexpire', KEYS[2], ARGV[2])
    else
      holder = v or ''
      if redis.call('pttl', KEYS[2]) == -1 then status = -1 else status = 0 end
    end
  end
elseif ARGV[5] == 'acquire' then
  status = 1
  for i = 1, m do
    local v = redis.call('get', KEYS[1 + i])
    if v and v ~= ARGV[1] then
      holder = v
      if redis.call('pttl', KEYS[1 + i]) == -1 then status = -1 else status = 0 end
      break
    end
  end
  if status == 1 then
    for i = 1, m do
      if redis.call('set', KEYS[1 + i], ARGV[1], 'nx', 'px', ARGV[2]) then
        fresh[i] = true
      else
        -- Already ours (an earlier attempt with this token landed).
        redis.call('pexpire', KEYS[1 + i], ARGV[2])
      end
    end
  end
end

local out = {status, run, epoch, mstate, trust, holder}
for i = 1, m do
  local ck = KEYS[1 + m + i]
  local c = redis.call('hmget', ck, 'n', 'e')
  local n = tonumber(c[1] or '0')
  local flag = 0
  if not rule or (mstate == 'ok' and (trust == 'all' or c[2] == epoch)) then
    flag = 1
  end
  local raise = flag == 1 and trust == 'all' and n < tonumber(floor)
  if raise then
    n = tonumber(floor) -- reseeded node: every counter starts at the floor
  end
  if flag == 1 and fresh[i] then
    if raise then
      redis.call('hset', ck, 'n', floor)
    end
    n = redis.call('hincrby', ck, 'n', 1)
    if rule and not c[2] then
      redis.call('hset', ck, 'e', epoch)
    end
    flag = 2
  end
  out[#out + 1] = n
  out[#out + 1] = flag
end
return out
