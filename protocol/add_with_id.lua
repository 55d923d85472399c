-- add() with an id given by the caller (docs/clients.md, Adding): idempotent while a job with
-- that id exists. A transaction cannot branch, so this is a script.
-- KEYS: jobs pending schedule   ARGV: id payload delay_ms group [job_group]
-- group is the stream's consumer group (workers); job_group, when given, is the job's own group
-- for fair release (ECHO.ADD ... GROUP), a different thing: the payload then carries it too
-- (docs/clients.md, Groups), so that the job's retries stay in it.
-- Reply: 1 added, 0 a job with this id exists (nothing written).
-- ECHO.ADD decides where the run goes: straight into pending when nothing governs the queue's
-- release, else into the schedule so that its release limit and hold apply to first runs too
-- (a grouped run always goes into its group's part of the schedule).
-- A missing pending would become a list there, so the stream (with the workers' group, as a
-- worker's start makes it) is made first; the schedule's type is checked before that write.
-- ECHO.ADD is the one write that can then be refused (a key of another type, a stream out of
-- IDs, a server over maxmemory, a job group the server refuses): a refused add is the script's
-- error with nothing of the job written, so the id is not left taken by a job that is nowhere.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TYPE', KEYS[3])['ok']
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  redis.call('XGROUP', 'CREATE', KEYS[2], ARGV[4], '0', 'MKSTREAM')
end
if ARGV[5] then
  redis.call('ECHO.ADD', KEYS[3], KEYS[2], ARGV[1], 'DELAY', ARGV[3], 'GROUP', ARGV[5])
else
  redis.call('ECHO.ADD', KEYS[3], KEYS[2], ARGV[1], 'DELAY', ARGV[3])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
