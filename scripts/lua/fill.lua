-- Benchmark set-up only (never measured): adds `n` members to a sorted set
-- server-side, 1000 per ZADD.
-- EVALSHA <sha> 1 key n first_score step prefix first_index
-- member i (0-based) is prefix .. (first_index + i) with score
-- first_score + i * step. Scores stay below 10^14, so Lua prints them exactly.
local n, s0, step = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prefix, off = ARGV[4], tonumber(ARGV[5])
local args, k = {}, 0
for i = 0, n - 1 do
  args[k + 1] = string.format('%d', s0 + i * step)
  args[k + 2] = prefix .. string.format('%d', off + i)
  k = k + 2
  if k == 2000 then
    redis.call('ZADD', KEYS[1], unpack(args, 1, k))
    k = 0
  end
end
if k > 0 then redis.call('ZADD', KEYS[1], unpack(args, 1, k)) end
return redis.call('ZCARD', KEYS[1])
