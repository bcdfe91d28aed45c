-- Records that a stream's entries up to a cursor are done (delivered, or dropped and counted),
-- if this replica still holds the stream. A stream with nothing after the cursor leaves the due
-- set and its state goes, in the same step, so that nothing grows with the number of
-- conversations; an append after that marks it due again (the stream script, ZADD NX).
--
-- KEYS[1] the endpoint's due set   KEYS[2] the stream's state hash   KEYS[3] the stream
-- ARGV[1] owner id    ARGV[2] cursor: the last entry done    ARGV[3] lease, ms
-- Returns 0: the claim was lost, nothing written; 1: entries wait after the cursor; 2: settled
if redis.call('HGET', KEYS[2], 'owner') ~= ARGV[1] then
  return 0
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function after(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams > bms or (ams == bms and aseq > bseq)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cursor = ARGV[2]
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #last == 0 or not after(last[1][1], cursor) then
  redis.call('ZREM', KEYS[1], KEYS[3])
  redis.call('DEL', KEYS[2])
  return 2
end
redis.call('HSET', KEYS[2], 'cursor', cursor, 'until', string.format('%d', now + tonumber(ARGV[3])))
local next = redis.call('XRANGE', KEYS[3], '(' .. cursor, '+', 'COUNT', 1)
if next[1] then
  local ms = parse(next[1][1])
  redis.call('ZADD', KEYS[1], 'XX', ms, KEYS[3])
end
return 1
