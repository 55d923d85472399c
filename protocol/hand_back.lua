-- An entry taken but not started, handed back when the worker closes (docs/clients.md,
-- Working, step 8), one call per entry.
-- KEYS: pending   ARGV: entry id
-- Reply: 1 handed back, 0 the entry is no longer pending (a resend: nothing written).
-- The new entry is written first: a refused XADD (a stream out of IDs) writes nothing and the
-- old entry stays delivered, taken over after the lease.
if #redis.call('XPENDING', KEYS[1], 'workers', ARGV[1], ARGV[1], 1) == 0 then return 0 end
redis.call('XADD', KEYS[1], '*', 'job', ARGV[2])
redis.call('XACK', KEYS[1], 'workers', ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
