-- Evicts the members of presence sorted sets whose score fell out of the window.
--
-- Everything happens inside one script so that nothing can interleave: the time is read from
-- Redis (one clock for app servers and every sweeper), and a member is removed only if its score
-- is stale at that instant. A heartbeat that lands before the script is seen; one that lands after
-- finds its member gone and re-adds it. Two sweepers can never both remove (and so both announce)
-- one member.
--
-- KEYS     sorted sets to sweep (in a cluster, all in one hash slot)
-- ARGV[1]  ttl, in the score unit
-- ARGV[2]  's' or 'ms': how TIME becomes a score
-- ARGV[3]  chunk: most members one ZRANGE / ZREMRANGEBYRANK step touches
-- ARGV[4]  budget: most members this call removes or returns over all keys; keeps it short
-- ARGV[5]  roster limit: most remaining members returned per key that lost members
-- ARGV[6]  '' or a ceiling in the score unit: staleness is judged at the earlier of it and now
--          (after an outage the daemon judges at the outage's start, so that members who could
--          not heartbeat meanwhile are spared); events are still stamped with now
--
-- Returns { now, results }, now formatted with %.17g in the score unit, and per key:
--   { status, card, oldest, removed, roster, stale }
--   status  0 done, 1 budget spent with stale members left, 2 not reached, 3 not a sorted set
--   card    members left; oldest: lowest remaining score or false
--   removed flat { member, score, ... } of what this call removed
--   roster  up to ARGV[5] remaining members, most recently seen first (only if any were removed)
--   stale   members removed
-- Statuses 2 and 3 come without the other fields.

local ttl = tonumber(ARGV[1])
local chunk = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])
local roster_limit = tonumber(ARGV[5])

local t = redis.call('TIME')
local now
if ARGV[2] == 'ms' then
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local judged = now
if ARGV[6] and ARGV[6] ~= '' then
  judged = math.min(now, tonumber(ARGV[6]))
end
local cutoff = judged - ttl
-- Exclusive bound: a score exactly at the cutoff is still inside the window.
local below = '(' .. string.format('%.17g', cutoff)

local results = {}
for i, key in ipairs(KEYS) do
  if budget <= 0 then
    results[i] = { 2 }
  else
    -- pcall: the key may have changed type since SCAN saw it; skip it rather than fail the batch.
    local first = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first.err then
      results[i] = { 3 }
    elseif #first == 0 then
      results[i] = { 0, 0, false, {}, {}, 0 }
    elseif tonumber(first[2]) >= cutoff then
      results[i] = { 0, redis.call('ZCARD', key), first[2], {}, {}, 0 }
    else
      local removed = {}
      local count = 0
      local status = 0
      while true do
        local n = math.min(chunk, budget)
        local stale = redis.call('ZRANGE', key, '-inf', below, 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
        local got = #stale / 2
        if got > 0 then
          -- The stale members are the lowest-ranked ones, in the order ZRANGE returned them,
          -- so removing by rank removes exactly these without looking each member up again.
          redis.call('ZREMRANGEBYRANK', key, 0, got - 1)
          for j = 1, #stale do
            removed[#removed + 1] = stale[j]
          end
          count = count + got
          budget = budget - got
        end
        if got < n then
          break
        end
        if budget <= 0 then
          status = 1
          break
        end
      end
      local card = redis.call('ZCARD', key)
      local oldest = false
      local roster = {}
      if card > 0 then
        oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
        if roster_limit > 0 then
          roster = redis.call('ZRANGE', key, 0, roster_limit - 1, 'REV')
          budget = budget - #roster
        end
      end
      results[i] = { status, card, oldest, removed, roster, count }
    end
  end
end
return { string.format('%.17g', now), results }
