local token, mark, exact = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local now = now_ms(); epoch(now)
return each_node(4, function(node, e)
  local old = num(redis.call('HGET', KEYS[2], node))
  if e and e.t == token then
    if exact or mark > old then redis.call('HSET', KEYS[2], node, str(mark)) end
    e.e = str(now); redis.call('HSET', KEYS[1], node, cjson.encode(e))   -- free at once
    return false
  end
  -- Forgotten: the mark raised only (as a store does); another claim's: untouched.
  if not e and mark > old then redis.call('HSET', KEYS[2], node, str(mark)) end
  return true
end)
