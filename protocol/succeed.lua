-- Successes (docs/clients.md, Working, step 3), up to success_batch runs a call (constants.json).
-- KEYS: pending jobs attempts errors   ARGV: entry id [entry id ...]
-- Reply: how many of the runs were settled now (an entry no longer pending was settled before)
-- Only the runs whose entry this delivery still owns (XACK replies 1) have their entry and job
-- deleted: a batch resent after its reply was lost deletes nothing, though the id may meanwhile
-- be a new job's. The hashes' types are checked before the first write, so a refused batch
-- writes nothing. An entry whose job was removed goes with the id '' (no job has it).
redis.call('HLEN', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('HLEN', KEYS[4])
local entries, ids = {}, {}
for i = 1, #ARGV, 2 do
  if redis.call('XACK', KEYS[1], 'workers', ARGV[i]) == 1 then
    entries[#entries + 1] = ARGV[i]
    ids[#ids + 1] = ARGV[i + 1]
  end
end
if #entries > 0 then
  redis.call('XDEL', KEYS[1], unpack(entries))
  redis.call('HDEL', KEYS[2], unpack(ids))
  redis.call('HDEL', KEYS[3], unpack(ids))
  redis.call('HDEL', KEYS[4], unpack(ids))
end
return #entries
