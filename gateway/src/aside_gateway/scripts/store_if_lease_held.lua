-- The lease holder's store (contracts/README.md, "Coherence", step 2): store the
-- value only while the caller's lease is still in place, then drop the lease,
-- atomically. A writer that deleted key and lease after its commit makes this a
-- no-op, so a value read before the commit never lands.
-- KEYS[1] key, KEYS[2] lease; ARGV[1] token, ARGV[2] value, ARGV[3] ttl seconds,
-- ARGV[4] (optional) ttl ms, used instead of ARGV[3] when given (a jittered or
-- stale-bounded TTL, contracts/cache.json `expiry`). Returns 1 when stored, 0 otherwise. One file: the gateway (tiers/l2.py) loads it
-- from its package, and contracts/store_if_lease_held.lua, which the core's
-- test reader (internal/cachetest/lease.go) runs, links to it.
if redis.call('GET', KEYS[2]) == ARGV[1] then
  if ARGV[4] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  end
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
