-- Renews (or, with a lease of 0, releases) this replica's claims on streams, only where it still
-- holds them: a claim taken over meanwhile is the new owner's.
--
-- KEYS[1] the due set the streams are in (names their slot on a cluster; not read)
-- ARGV[1] the prefix of the per-stream state hashes   ARGV[2] owner id
-- ARGV[3] lease, ms (0: release)                      ARGV[4..] the streams
-- Returns { now ms, { 1 if still held, else 0, per stream } }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local held = {}
for i = 4, #ARGV do
  local state = ARGV[1] .. ARGV[i]
  if redis.call('HGET', state, 'owner') == ARGV[2] then
    if lease > 0 then
      redis.call('HSET', state, 'until', string.format('%d', now + lease))
    else
      redis.call('HDEL', state, 'owner', 'until')
    end
    held[#held + 1] = 1
  else
    held[#held + 1] = 0
  end
end
return { now, held }
