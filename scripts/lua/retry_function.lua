#!lua name=echobench
-- The same jittered retry as retry.lua, as a Valkey function:
-- FCALL echobench_retry 1 schedule job base max attempts
local function retry(keys, args)
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local base, max, a = tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
  local d = base * 2 ^ (a - 1)
  if d > max then d = max end
  local score = now + math.random(0, d)
  redis.call('ZADD', keys[1], score, args[1])
  return score
end
redis.register_function('echobench_retry', retry)
