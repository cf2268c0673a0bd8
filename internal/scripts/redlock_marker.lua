-- Redlock, one node: create the node marker if it is missing.
-- KEYS[1] node marker
-- ARGV[1] new epoch, ARGV[2] trust: "all" (cluster bootstrap: every node was
-- empty, so a missing counter means 0) or "own" (the node rejoined empty: only
-- counters written under this epoch are trusted), ARGV[3] the run_id the
-- client saw when it found the marker missing ("all" is refused if the server
-- restarted since).
-- Returns 1 when created, 0 when a marker exists or the server restarted.
local run = string.match(redis.call('info', 'server'), 'run_id:([^\r\n]*)') or ''
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
if ARGV[2] == 'all' and run ~= ARGV[3] then
  return 0
end
redis.call('hset', KEYS[1], 'epoch', ARGV[1], 'run', run, 'trust', ARGV[2])
return 1
