-- One failed job (docs/clients.md, Working, steps 4 and 5).
-- KEYS: schedule pending dead attempts errors jobs
-- ARGV: id entry policy attempt max_attempts message hold_ms [job_group [hold_group]]
-- job_group: the group of a grouped job (read from its payload's envelope, docs/clients.md,
-- Groups), so that the retry goes back into it; absent (or '' when hold_group follows) for a job
-- without one. hold_group: the one group RetryAfter holds (ECHO.HOLD ... GROUP), absent to hold
-- the whole queue; '' is no group name, so it cannot be mistaken for one.
-- Reply: {fired, held}. fired: the retry's fire time, -1 (dead), -3 (the entry is no longer
-- pending: a resend whose first try reached the server, or a run settled elsewhere; nothing is
-- written) or -4 (the job was removed while it ran: the entry is dropped, no trace written).
-- held: 0 (no hold asked: hold_ms 0 would lift another worker's hold), the hold's end (server
-- ms), or the hold's refusal as text.
-- Every check comes before the first write, and ECHO.RETRY (which a schedule, dead or group key
-- of another type refuses) is that first write: a refused failure writes nothing and leaves the
-- entry delivered, taken over after the lease, never in no key at all. The hold comes last and
-- under pcall: a hold that cannot be taken never stops the failure from being written.
if #redis.call('XPENDING', KEYS[2], 'workers', ARGV[2], ARGV[2], 1) == 0 then return {-3, 0} end
redis.call('HLEN', KEYS[4])
redis.call('HLEN', KEYS[5])
if redis.call('HEXISTS', KEYS[6], ARGV[1]) == 0 then
  redis.call('XACK', KEYS[2], 'workers', ARGV[2])
  redis.call('XDEL', KEYS[2], ARGV[2])
  return {-4, 0}
end
local fired
if ARGV[8] and ARGV[8] ~= '' then
  fired = redis.call('ECHO.RETRY', KEYS[1], ARGV[1], ARGV[3], ARGV[4],
                     'MAXATTEMPTS', ARGV[5], 'DEAD', KEYS[3], 'GROUP', ARGV[8])
else
  fired = redis.call('ECHO.RETRY', KEYS[1], ARGV[1], ARGV[3], ARGV[4],
                     'MAXATTEMPTS', ARGV[5], 'DEAD', KEYS[3])
end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
redis.call('XACK', KEYS[2], 'workers', ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
local held = 0
if ARGV[7] ~= '0' then
  if ARGV[9] then
    held = redis.pcall('ECHO.HOLD', KEYS[1], ARGV[7], 'GROUP', ARGV[9])
  else
    held = redis.pcall('ECHO.HOLD', KEYS[1], ARGV[7])
  end
  if type(held) == 'table' then held = held.err end
end
return {fired, held}
