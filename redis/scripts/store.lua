local token, ttl, mark = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms(); epoch(now)
return each_node(4, function(node, e)
  -- Ours: the mark raised (never lowered) and the claim renewed, even if expired (nobody
  -- took it). Forgotten (a restart or a promotion lost the claim): lost, but the mark is
  -- raised, so that the holder's high-water knowledge is back before any claimant. Another
  -- claim's: lost, and nothing touched.
  if not e or e.t == token then
    if mark > num(redis.call('HGET', KEYS[2], node)) then
      redis.call('HSET', KEYS[2], node, str(mark)) end
  end
  if e and e.t == token then
    e.e = str(now + ttl); redis.call('HSET', KEYS[1], node, cjson.encode(e))
    return false
  end
  return true
end)
