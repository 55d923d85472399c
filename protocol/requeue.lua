-- requeue(id): dead -> pending with its attempts reset (docs/clients.md, Inspecting and
-- repairing).
-- KEYS: dead attempts errors pending   ARGV: id
-- Reply: 1 requeued, 0 the id is not dead (nothing written; also what a resend finds).
-- Every type is checked (ZSCORE, HLEN) and the XADD, the one write that can be refused (a
-- pending of another type, a stream out of IDs), comes first: a refused requeue leaves the job
-- in dead with its attempts and error.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('XADD', KEYS[4], '*', 'job', ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
