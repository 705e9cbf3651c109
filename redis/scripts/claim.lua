local token, holder = ARGV[1], ARGV[2]
local low, high, count = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local reach, ttl, margin = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local now = now_ms()
local seen = epoch(now)
local longest = math.max(num(redis.call('HGET', KEYS[3], 'ttl')), ttl)
redis.call('HSET', KEYS[3], 'ttl', str(longest))
-- Data may have been lost at this epoch's start: no claim until every holder from before
-- it has passed its hold (and had time to restore its mark), plus the clock margin.
if now < seen + longest + margin then return {'gated', seen + longest + margin - now} end
local marks, m = {}, redis.call('HGETALL', KEYS[2])
for i = 1, #m, 2 do marks[tonumber(m[i])] = tonumber(m[i + 1]) end
local entries, live, ours, blocked, held = {}, {}, {}, {}, 0
local c = redis.call('HGETALL', KEYS[1])
for i = 1, #c, 2 do
  local node, e = tonumber(c[i]), cjson.decode(c[i + 1])
  entries[node] = e
  if e.t == token then ours[#ours + 1] = node                -- this lease's claim, answer lost
  elseif tonumber(e.e) > now then live[node] = true end
end
if #ours > 0 then                                            -- found again: renew and return
  table.sort(ours)
  local out, mark = {'claimed', 0}, 0
  for _, node in ipairs(ours) do
    local e = entries[node]; e.e = str(now + ttl)
    redis.call('HSET', KEYS[1], node, cjson.encode(e))
    mark = math.max(mark, marks[node] or 0)
    out[#out + 1] = node; out[#out + 1] = e.g
  end
  out[2] = str(mark); out[#out + 1] = '|'
  return out
end
-- The nodes of the range that cannot be taken: others' live claims, and free nodes whose
-- mark is past the reach (passed over). O(entries + count), never O(range).
for node in pairs(live) do
  if node >= low and node <= high then blocked[#blocked + 1] = node; held = held + 1 end
end
for node, mark in pairs(marks) do
  if node >= low and node <= high and not live[node] and mark > reach then
    blocked[#blocked + 1] = node end
end
table.sort(blocked)
local chosen, passed, j, n = {}, {}, 1, low
while #chosen < count and n <= high do
  if j <= #blocked and blocked[j] == n then
    if not live[n] and #passed < 16 then passed[#passed + 1] = n end
    j = j + 1
  else
    chosen[#chosen + 1] = n
  end
  n = n + 1
end
if #chosen < count then                                      -- all or none: nothing written
  -- choose() semantics: ahead = the lowest passed-over node of the whole range
  while j <= #blocked and #passed < 1 do
    if not live[blocked[j]] then passed[1] = blocked[j] end; j = j + 1 end
  local a = passed[1]
  return {'short', held, a or -1, a and str(marks[a]) or '0'}
end
local out, mark = {'claimed', 0}, 0
for _, node in ipairs(chosen) do
  local gen = ((entries[node] and entries[node].g) or 0) + 1
  redis.call('HSET', KEYS[1], node,
    cjson.encode({t = token, g = gen, e = str(now + ttl), h = holder}))
  mark = math.max(mark, marks[node] or 0)
  out[#out + 1] = node; out[#out + 1] = gen
end
out[2] = str(mark); out[#out + 1] = '|'
for _, p in ipairs(passed) do out[#out + 1] = p; out[#out + 1] = str(marks[p]) end
return out
