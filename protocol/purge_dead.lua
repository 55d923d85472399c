-- purge_dead(older_than_ms): the dead jobs that died at or before the server's
-- now - older_than_ms, removed from dead, jobs, attempts and errors, 1,000 a round
-- (docs/clients.md, Inspecting and repairing).
-- KEYS: dead jobs attempts errors   ARGV: older_than_ms
-- Reply: how many were removed.
-- The hashes' types are checked before the first write: a purge refused by a key of another
-- type deletes nothing, rather than leaving ids in dead without their payload.
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[1])
local max = string.format('%d', cutoff)
local n = 0
while true do
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', max, 'LIMIT', 0, 1000)
  if #ids == 0 then break end
  redis.call('ZREM', KEYS[1], unpack(ids))
  redis.call('HDEL', KEYS[2], unpack(ids))
  redis.call('HDEL', KEYS[3], unpack(ids))
  redis.call('HDEL', KEYS[4], unpack(ids))
  n = n + #ids
end
return n
