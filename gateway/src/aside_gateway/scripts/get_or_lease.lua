-- A reader's miss (tiers/l2.py): the value if there is one, else the lease.
-- KEYS[1] key, KEYS[2] lease; ARGV[1] token, ARGV[2] lease ttl ms, ARGV[3] now
-- (unix ms), ARGV[4] (a refresh) the value the caller read and means to refresh.
-- Returns {1, value} on a value, {2} when the lease was taken, {0} when someone
-- else holds it, {3, mark} when the lease is a failure mark (a holder's database
-- read just failed: fail_lease.lua; a mark starts with '!fail:', a token never does).
-- A fill: a value in an envelope (contracts/cache.json `expiry`) whose logical
-- expiry is past counts as none. A refresh: only another value than the one read
-- counts (a refresh landed in between: answer it), so a reader that read the old
-- value just before another process's refresh landed and dropped its lease does
-- not refresh again.
local value = redis.call('GET', KEYS[1])
if value then
    if ARGV[4] then
        if value ~= ARGV[4] then
            return {1, value}
        end
    elseif string.sub(value, 1, 4) ~= '~x1:' then
        return {1, value}
    else
        local stop = string.find(value, ':', 5, true)
        local expires = stop and tonumber(string.sub(value, 5, stop - 1))
        if expires == nil or expires > tonumber(ARGV[3]) then
            return {1, value}
        end
    end
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {2}
end
local held = redis.call('GET', KEYS[2])
if held and string.sub(held, 1, 6) == '!fail:' then
    return {3, held}
end
return {0}
