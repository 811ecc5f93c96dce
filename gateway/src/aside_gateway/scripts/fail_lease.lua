-- A lease holder whose database read failed (tiers/reads.py): replace its lease,
-- only while it is still the caller's, with a failure mark that readers waiting
-- on the lease can tell from a token (contracts/README.md, "Coherence", step 5),
-- so they answer 503 at once instead of each reading the failing database.
-- KEYS[1] lease; ARGV[1] token, ARGV[2] mark, ARGV[3] the mark's life in ms.
-- Returns 1 when marked, 0 when the lease was no longer the caller's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
