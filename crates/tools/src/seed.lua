-- Fills presence sorted sets with synthetic members (`presence-sweeper-tools seed`).
--
-- One call writes a chunk of keys, so a million keys take a few hundred calls rather than
-- twenty million commands. Scores come from Redis TIME, like real heartbeats.
--
-- KEYS     the sorted sets to fill, one per conversation (in a cluster, all in one hash slot)
-- ARGV[1]  members per key, M: named u1..uM
-- ARGV[2]  stale members per key, S: exactly this many in every key
-- ARGV[3]  ttl, in seconds
-- ARGV[4]  's' or 'ms': the score unit
-- ARGV[5]  index of KEYS[1] in the whole keyspace (from 0)
-- ARGV[6]  first rank to write, ARGV[7] the rank after the last: a key bigger than one call
--          should write is written over several calls, so that no call builds huge Lua tables
--          (their garbage would then be collected during the sweeper's scripts, slowing them)
--
-- Member j of key k (both from 0) is stale when (j - k) mod M < S: the stale ones rotate over
-- the members, so every key has exactly S while different keys lose different users. Ages are
-- spread evenly over the ranks with a jitter hashed from the first key index rather than drawn
-- at random, so a rerun writes the same shape: fresh members are [0, ttl / 2) s old, stale ones
-- ttl + [1, 600) s old, at the call's TIME. Every key of a call gets the same scores (computed
-- and formatted once per call), on different members.
--
-- Two choices make this several times faster, because Redis's own work per member dominates:
-- - Members go to ZADD newest first. A small sorted set is a listpack, where ZADD finds the
--   place of a new member by walking from the head and parsing scores; in this order every
--   member belongs at the head.
-- - Scores are whole units (seconds or milliseconds) when the ttl spans at least 4 of them:
--   Redis stores an integral score without formatting a double, the costliest step otherwise.
--   Flooring ages a fresh member by under one unit, which keeps it fresh (under ttl / 2 + 1).
--
-- Returns the number of members written.

local m = tonumber(ARGV[1])
local s = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local unit = 1
if ARGV[4] == 'ms' then
  unit = 1000
end
local first = tonumber(ARGV[5])
local r0 = tonumber(ARGV[6])
local r1 = tonumber(ARGV[7])
local whole = ttl * unit >= 4

local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local fresh = m - s
local jitter = ((first * 7919 + 12345) % 65521) / 65521
local scores = {}
for r = r0, r1 - 1 do
  local age
  if r < fresh then
    age = (r + jitter) / fresh * ttl / 2
  else
    age = ttl + 1 + (r - fresh + jitter) / s * 599
  end
  local score = (now - age) * unit
  if whole then
    score = math.floor(score)
  end
  scores[r - r0 + 1] = string.format('%.17g', score)
end

-- Small keys share their member names: build them once per call.
local names = {}
if m <= 10000 then
  for j = 1, m do
    names[j] = 'u' .. j
  end
end

-- unpack() is limited by the Lua stack; keep each ZADD well below it.
local per_zadd = 1000
for i, key in ipairs(KEYS) do
  local k = first + i - 1
  local args = {}
  -- Rank r of the fresh members is member (k + s + r) mod m; of the stale ones, (k + r - fresh)
  -- mod m: together every member once.
  for r = r0, r1 - 1 do
    local j
    if r < fresh then
      j = (k + s + r) % m
    else
      j = (k + r - fresh) % m
    end
    args[#args + 1] = scores[r - r0 + 1]
    args[#args + 1] = names[j + 1] or ('u' .. (j + 1))
    if #args >= 2 * per_zadd then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
  end
end
return #KEYS * (r1 - r0)
