-- Deletes every value and lease under the cache prefix, then tells the
-- gateways' L1 tiers to empty themselves: the flush a seed owes once it has
-- replaced the users table. Run by the seeder after its swap and, when the
-- seeder died first, by the core's outbox relay (contracts/README.md,
-- "Coherence when a seed replaces the table"). One script, so atomic: no
-- store can land between two rounds of its SCAN and escape it. On a Redis
-- Cluster it runs on every primary, each flushing its own keys.
-- ARGV[1]: the pattern (seeding.json cache_pattern), ARGV[2]: the channel
-- (cache.json tiers.invalidation_channel), ARGV[3]: the flush message
-- (cache.json tiers.flush_message). Returns how many keys it deleted.
-- The core embeds this file (flush.go); contracts/flush_cache.lua links to it.
local cursor = '0'
local deleted = 0
repeat
    local reply = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
    cursor = reply[1]
    local keys = reply[2]
    -- One key a call: on a Redis Cluster node a command (even in a script)
    -- may only name keys of one slot, and SCAN's keys span many.
    for i = 1, #keys do
        deleted = deleted + redis.call('UNLINK', keys[i])
    end
until cursor == '0'
redis.call('PUBLISH', ARGV[2], ARGV[3])
return deleted
