-- Promotion as a script: the fastest shape we found (see BENCHMARKS.md).
-- EVALSHA <sha> 2 schedule pending limit [chunk]
-- Moves up to `limit` members with score <= server TIME (ms), earliest first,
-- LPUSHing them in fire-time order (earliest ends at the right), then removes
-- exactly those from the schedule. They are the `n` lowest-ranked members, so
-- ZREMRANGEBYRANK 0 n-1 removes them and nothing else. LPUSH goes in chunks
-- because unpack() is limited by the Lua C stack (about 8000 values).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local n = #due
if n == 0 then return 0 end
local chunk = tonumber(ARGV[2]) or 7000
for i = 1, n, chunk do
  local j = i + chunk - 1
  if j > n then j = n end
  redis.call('LPUSH', KEYS[2], unpack(due, i, j))
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
return n
