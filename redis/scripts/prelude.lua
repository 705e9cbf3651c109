local function now_ms()                         -- the server's clock: expiry only
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(v) return (v and tonumber(v)) or 0 end   -- HGET of a missing field is false
local function str(n) return string.format('%.0f', n) end
-- The server's epoch: the process (run_id changes on every start) and its replication
-- history (master_replid changes when a replica is promoted: REPLICAOF NO ONE / Sentinel),
-- and since when writes acknowledged before it may be lost. A server never promoted since
-- it started (no second replication ID) lost what it lost at its start: its uptime, in whole
-- seconds, puts that start no earlier than it was. A promoted one lost what it missed at
-- its promotion, which is before the first script that sees the new ID.
-- INFO is allowed in scripts (flags: random, loading, stale, sentinel; no `noscript`), and
-- Redis 7 replicates a script's effects, so the values recorded are the master's.
local function epoch(now)
  local info = redis.call('INFO', 'server', 'replication')   -- several sections: 7.0+
  local id = string.match(info, 'run_id:(%x+)') .. ':' .. string.match(info, 'master_replid:(%x+)')
  local seen = redis.call('HMGET', KEYS[4], 'id', 'seen')
  if seen[1] ~= id then
    local since = now
    if string.match(info, 'second_repl_offset:(-?%d+)') == '-1' then
      since = now - tonumber(string.match(info, 'uptime_in_seconds:(%d+)')) * 1000
    end
    redis.call('HSET', KEYS[4], 'id', id, 'seen', str(since))
    return since
  end
  return tonumber(seen[2])
end
-- Calls f(node, claim) for each node of ARGV[first..] with its claim entry (false when the
-- server has none); the places (from 0) of the nodes for which f says lost.
local function each_node(first, f)
  local lost = {}
  for i = first, #ARGV do
    local raw = redis.call('HGET', KEYS[1], ARGV[i])
    if f(ARGV[i], raw and cjson.decode(raw)) then lost[#lost + 1] = i - first end
  end
  return lost
end
