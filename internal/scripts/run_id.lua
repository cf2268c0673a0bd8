-- server_run_id returns the run_id of the server process (INFO server), up
-- to the end of its line: plain finds are much cheaper than a pattern over
-- the whole section. Prepended to the scripts that call run_id(): a script
-- reads it on every run, a function once per server process (function.go).
local function server_run_id()
  local info = redis.call('info', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  if not at then
    return ''
  end
  local stop = string.find(info, '\r', at, true) or (#info + 1)
  return string.sub(info, at + 7, stop - 1)
end
