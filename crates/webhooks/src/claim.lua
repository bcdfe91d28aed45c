-- Claims streams of an endpoint's due set for one replica: a stream is claimed by the replica
-- that finds it unowned or its lease ended, so that with several replicas each event is posted by
-- one of them, and a dead replica's streams are taken over once its lease ends.
--
-- KEYS[1] the endpoint's due set (stream -> when its oldest undelivered entry was appended, ms)
-- ARGV[1] the prefix of the per-stream state hashes (cursor, owner, until)
-- ARGV[2] this replica's owner id    ARGV[3] lease, ms
-- ARGV[4] most streams to claim      ARGV[5] most due streams to look at (bounds the call)
-- Returns { now ms, due streams, oldest due score or false, { stream, cursor or '', score, ... } }
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local due = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[5]) - 1, 'WITHSCORES')
local claimed = {}
for i = 1, #due, 2 do
  if #claimed >= 3 * want then break end
  local state = ARGV[1] .. due[i]
  local h = redis.call('HMGET', state, 'owner', 'until', 'cursor')
  if not h[1] or tonumber(h[2] or '0') < now then
    redis.call('HSET', state, 'owner', ARGV[2], 'until', string.format('%d', now + lease))
    claimed[#claimed + 1] = due[i]
    claimed[#claimed + 1] = h[3] or ''
    claimed[#claimed + 1] = due[i + 1]
  end
end
local oldest = false
if #due > 0 then oldest = due[2] end
return { now, redis.call('ZCARD', KEYS[1]), oldest, claimed }
