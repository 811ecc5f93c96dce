-- KEYS[1] a key; ARGV[1] a value. Deletes the key only while it holds that value:
-- a lease only while it is still the caller's token (its release), a malformed
-- value only if no other was stored since (tiers/l2.py).
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
