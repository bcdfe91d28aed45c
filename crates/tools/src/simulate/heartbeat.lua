-- Heartbeats of several members of one presence set, written the way the README tells apps to
-- (`presence-sweeper-tools simulate`): score from Redis TIME, ZADD GT, key TTL refreshed when it
-- has run half down (a write less per heartbeat, and one keyspace notification less).
--
-- KEYS[1]  the presence set (one key per call, so the call is cluster-safe)
-- ARGV[1]  key TTL in seconds (about 10x the sweep's ttl)
-- ARGV[2]  's' or 'ms': how TIME becomes a score
-- ARGV[3..] the members
--
-- Returns the score written, formatted with %.17g so that it reads back exactly.

local t = redis.call('TIME')
local now
if ARGV[2] == 'ms' then
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local score = string.format('%.17g', now)

-- unpack() is limited by the Lua stack; keep each ZADD well below it.
local per_zadd = 1000
local args = {}
for i = 3, #ARGV do
  args[#args + 1] = score
  args[#args + 1] = ARGV[i]
  if #args >= 2 * per_zadd then
    redis.call('ZADD', KEYS[1], 'GT', unpack(args))
    args = {}
  end
end
if #args > 0 then
  redis.call('ZADD', KEYS[1], 'GT', unpack(args))
end
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[1]) / 2 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return score
