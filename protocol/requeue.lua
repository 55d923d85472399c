-- requeue(id): dead -> the release, with its attempts reset (docs/clients.md, Inspecting and
-- repairing). The run goes through ECHO.ADD like any first run: straight into pending when nothing
-- governs the queue's release, else into the schedule (into its group for a grouped job), so a
-- limit, a hold and the fair share apply to requeued jobs too.
-- KEYS: dead attempts errors pending schedule jobs   ARGV: id envelope group
-- envelope: the first bytes of a grouped job's payload entry (NUL, then constants.json's
-- job_group_envelope): the group is read from the entry `<envelope><n>:<group><payload>`, as a
-- worker reads it; an entry that is not a whole envelope with n >= 1 has no group. group: the
-- stream's consumer group (workers), made with the stream when pending is missing, as add_with_id
-- does (ECHO.ADD would make a missing pending a list); the schedule's type is checked first.
-- Reply: 1 requeued, 0 the id is not dead (nothing written; also what a resend finds).
-- Every type is checked (ZSCORE, HLEN, HGET) and ECHO.ADD, the one write that can be refused
-- (a schedule, pending or group key of another type, a stream out of IDs, a bad group), comes
-- first: a refused requeue leaves the job in dead with its attempts and error.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
local group
local entry = redis.call('HGET', KEYS[6], ARGV[1])
local head = #ARGV[2]
if entry and string.sub(entry, 1, head) == ARGV[2] then
  local colon = string.find(entry, ':', head + 1, true)
  local digits = colon and string.sub(entry, head + 1, colon - 1)
  if digits and string.match(digits, '^[1-9]%d?%d?%d?$') then
    local n = tonumber(digits)
    if #entry >= colon + n then group = string.sub(entry, colon + 1, colon + n) end
  end
end
if redis.call('EXISTS', KEYS[4]) == 0 then
  local t = redis.call('TYPE', KEYS[5])['ok']
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[3], '0', 'MKSTREAM')
end
if group then
  redis.call('ECHO.ADD', KEYS[5], KEYS[4], ARGV[1], 'GROUP', group)
else
  redis.call('ECHO.ADD', KEYS[5], KEYS[4], ARGV[1])
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
