local token, ttl, mark = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms(); epoch(now)
local lost = {}
for i = 4, #ARGV do
  local node = ARGV[i]
  -- Never lower; and raise even when fenced out: a holder whose claim a restart or a
  -- promotion forgot puts its high-water knowledge back (raising a mark never repeats an ID).
  if mark > num(redis.call('HGET', KEYS[2], node)) then
    redis.call('HSET', KEYS[2], node, str(mark)) end
  local raw = redis.call('HGET', KEYS[1], node)
  local e = raw and cjson.decode(raw)
  if e and e.t == token then                 -- ours: renew (even if expired: nobody took it)
    e.e = str(now + ttl); redis.call('HSET', KEYS[1], node, cjson.encode(e))
  else
    lost[#lost + 1] = i - 4
  end
end
return lost
