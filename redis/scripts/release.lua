local token, mark, exact = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now = now_ms(); epoch(now)
local lost = {}
for i = 4, #ARGV do
  local node = ARGV[i]
  local raw = redis.call('HGET', KEYS[1], node)
  local e = raw and cjson.decode(raw)
  local old = num(redis.call('HGET', KEYS[2], node))
  if e and e.t == token then
    if exact or mark > old then redis.call('HSET', KEYS[2], node, str(mark)) end
    e.e = str(now); redis.call('HSET', KEYS[1], node, cjson.encode(e))   -- free at once
  else
    -- Forgotten: the mark raised only (as a store does); another claim's: untouched.
    if not e and mark > old then redis.call('HSET', KEYS[2], node, str(mark)) end
    lost[#lost + 1] = i - 4
  end
end
return lost
