-- The jittered retry as a script: what a queue does today without echomq.
-- EVALSHA <sha> 1 schedule job base max attempts
-- delay = uniform 0..=min(base * 2^(attempts-1), max) (full jitter); the job is
-- scheduled at server TIME + delay. Returns the score.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local base, max, a = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local d = base * 2 ^ (a - 1)
if d > max then d = max end
local score = now + math.random(0, d)
redis.call('ZADD', KEYS[1], score, ARGV[1])
return score
