-- add() with an id given by the caller (docs/clients.md, Adding): idempotent while a job with
-- that id exists. A transaction cannot branch, so this is a script.
-- KEYS: jobs pending schedule   ARGV: id payload delay_ms
-- Reply: 1 added, 0 a job with this id exists (nothing written).
-- The enqueue is the one write that can be refused (a pending or schedule key of another type,
-- a stream out of IDs, a server over maxmemory) and it comes first: a refused add is the
-- script's error with nothing written, so the id is not left taken by a job that is nowhere.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if ARGV[3] == '0' then redis.call('XADD', KEYS[2], '*', 'job', ARGV[1])
else redis.call('ECHO.SCHEDULE', KEYS[3], ARGV[1], ARGV[3]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
