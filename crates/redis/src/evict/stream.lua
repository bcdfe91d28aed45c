-- Evicts the stale members of presence sorted sets and, in the same atomic step, appends each
-- event to a stream and publishes it: a member is removed only together with its entry.
--
-- Nothing can interleave with a script: the time is Redis's, only this call sees what it
-- removes (so with several sweepers every leave is appended and published once), and the
-- entry before each one is read here (`prev`), so a consumer can tell from the events alone
-- whether it missed one. The events are the daemon's own JSON, byte for byte
-- (src/events/mod.rs; a test compares them): the daemon passes the parts it encodes once.
--
-- The stream is written before the set: a refused write (XADD under maxmemory, a stream key of
-- another type, an ACL) stops the call before that key loses a member. Redis refuses a
-- "denyoom" command only as a script's first write, so once one entry went in the others do.
--
-- KEYS     pairs: a sorted set, then its stream (in a cluster, all in one hash slot)
-- ARGV[1]  ttl, in the score unit
-- ARGV[2]  's' or 'ms': how TIME becomes a score
-- ARGV[3]  budget: most members this call removes or lists over all keys
-- ARGV[4]  roster limit: most remaining members read per key that loses members
-- ARGV[5]  '' or a ceiling in the score unit: staleness is judged at the earlier of it and now
-- ARGV[6]  MAXLEN ~ of each XADD; '0': none
-- ARGV[7]  retention in ms: XTRIM MINID ~ (now - it); '0': none
-- ARGV[8]  the stream's key TTL in ms, set once per stream and call; '0': none
-- ARGV[9]  'member' (an event per member) or 'batch' (per key and step)
-- ARGV[10] events.max_bytes
-- ARGV[11] 'PUBLISH', 'SPUBLISH' or '' (append only)
-- ARGV[12] {"type":"<event>"     ARGV[13] ,"<sweep>":     ARGV[14] ,"<sweep>_count":
-- ARGV[15] ,"<sweep>_truncated":true
-- ARGV[16] the roster limit of an event (100): a roster listing fewer than the count (up to
--          it) says it is truncated
-- ARGV[17] bytes kept free in every event for "prev" and "id"
-- ARGV[18] '1': return each key's lowest remaining score (a deadline index needs it)
-- ARGV[19] the due sets of the webhooks of the sweep, space-separated ('' for none): each
--          stream appended to is marked due in each (ZADD NX, scored by now in ms) before
--          its first append, so that a webhook learns of its entries in the same atomic step
-- then per key: ,"conversation_id":"..." (and its _base64), then the channel
--
-- Returns { now, results }, now formatted with %.17g in the score unit, and per key:
--   { status, card, oldest, removed, published, unpublished, error }
--   status  0 done, 1 budget spent with stale members maybe left, 2 not reached,
--           3 not a sorted set, 4 the stream refused a write: `error` says why, and only the
--           members whose entries went in were removed
--   card    members left; oldest: lowest remaining score (if asked) or false
--   removed flat { member, score, ... } of what this call removed
--   published, unpublished: events published, and refused by PUBLISH (their entries stand)
-- Statuses 2 and 3 come without the other fields.

local ttl = tonumber(ARGV[1])
local budget = tonumber(ARGV[3])
local roster_limit = tonumber(ARGV[4])
local maxlen = ARGV[6]
local retention = tonumber(ARGV[7])
local stream_ttl = ARGV[8]
local batch = ARGV[9] == 'batch'
local max_bytes = tonumber(ARGV[10])
local publish = ARGV[11]
local HEAD, ROSTER_KEY, COUNT_KEY, TRUNCATED = ARGV[12], ARGV[13], ARGV[14], ARGV[15]
local ROSTER_FULL = tonumber(ARGV[16])
local CURSOR_ROOM = tonumber(ARGV[17])
local WANT_OLDEST = ARGV[18] == '1'
local PER_KEY = 19
local DUE = {}
for due in string.gmatch(ARGV[19], '%S+') do DUE[#DUE + 1] = due end

local t = redis.call('TIME')
local secs = tonumber(t[1]) + tonumber(t[2]) / 1000000
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now = secs
if ARGV[2] == 'ms' then
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local judged = now
if ARGV[5] ~= '' then
  judged = math.min(now, tonumber(ARGV[5]))
end
local below = '(' .. string.format('%.17g', judged - ttl)

local find, sub, byte, format, concat = string.find, string.sub, string.byte, string.format, table.concat

-- JSON, as src/events/mod.rs writes it ------------------------------------------------------

-- Anything but printable ASCII, `"` and `\`: an id with none of these is copied as it is.
local NOT_PLAIN = '[^]-~ !#-[]'
local ESCAPES = { ['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t',
  ['\8'] = '\\b', ['\12'] = '\\f' }

local function escape(s)
  return (string.gsub(s, '[%z\1-\31"\\]', function(c)
    return ESCAPES[c] or format('\\u%04x', byte(c))
  end))
end

-- `s` with U+FFFD in place of each invalid sequence (the longest prefix of a valid one, as
-- Rust's from_utf8_lossy does), and whether it was valid UTF-8.
local function lossy(s)
  if not find(s, '[\128-\255]') then
    return s, true
  end
  local out, n, i, len, valid = {}, 0, 1, #s, true
  while i <= len do
    local j = find(s, '[\128-\255]', i)
    if not j then
      n = n + 1; out[n] = sub(s, i)
      break
    end
    if j > i then
      n = n + 1; out[n] = sub(s, i, j - 1)
    end
    local c = byte(s, j)
    local need, lo, hi = 0, 128, 191
    if c >= 194 and c <= 223 then need = 1
    elseif c == 224 then need, lo = 2, 160
    elseif (c >= 225 and c <= 236) or c == 238 or c == 239 then need = 2
    elseif c == 237 then need, hi = 2, 159
    elseif c == 240 then need, lo = 3, 144
    elseif c >= 241 and c <= 243 then need = 3
    elseif c == 244 then need, hi = 3, 143
    end
    local k = 0
    while k < need do
      local b = byte(s, j + 1 + k)
      if not b or b < lo or b > hi then break end
      lo, hi = 128, 191
      k = k + 1
    end
    if need > 0 and k == need then
      n = n + 1; out[n] = sub(s, j, j + need)
      i = j + need + 1
    else
      valid = false
      n = n + 1; out[n] = '\239\191\189'
      i = j + 1 + k
    end
  end
  return concat(out), valid
end

local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function base64(s)
  local out, n = {}, 0
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + (b or 0) * 256 + (c or 0)
    local d1, d2 = math.floor(v / 262144), math.floor(v / 4096) % 64
    local d3, d4 = math.floor(v / 64) % 64, v % 64
    n = n + 1
    out[n] = sub(B64, d1 + 1, d1 + 1) .. sub(B64, d2 + 1, d2 + 1)
      .. (b and sub(B64, d3 + 1, d3 + 1) or '=') .. (c and sub(B64, d4 + 1, d4 + 1) or '=')
  end
  return concat(out)
end

-- An id as a JSON string (no base64).
local function str(s)
  if not find(s, NOT_PLAIN) then
    return '"' .. s .. '"'
  end
  return '"' .. escape((lossy(s))) .. '"'
end

-- "name":"<id>", and "name_base64":"..." after an id that is not UTF-8.
local function field(name, s)
  if not find(s, NOT_PLAIN) then
    return '"' .. name .. '":"' .. s .. '"'
  end
  local text, valid = lossy(s)
  local out = '"' .. name .. '":"' .. escape(text) .. '"'
  if not valid then
    out = out .. ',"' .. name .. '_base64":"' .. base64(s) .. '"'
  end
  return out
end

-- The next 16-digit decimal above the digits `d` (a power of two may round-trip only there).
local function up(d)
  local i = #d
  while i > 0 and sub(d, i, i) == '9' do i = i - 1 end
  if i == 0 then return nil end
  return sub(d, 1, i - 1) .. string.char(byte(d, i) + 1) .. string.rep('0', #d - i)
end

-- A number as serde_json writes an f64: the shortest digits that read back as it, in plain
-- notation from 1e-5 up to 1e16, else as 1.5e-7 or 2.5e+117; non-finite as 0.0 (as
-- `events::seconds`).
local function slow_num(x)
  if x ~= x or x == math.huge or x == -math.huge then x = 0 end
  if x == 0 then
    if 1 / x < 0 then return '-0.0' end
    return '0.0'
  end
  local sign, digits, exp = '', nil, nil
  -- A normal double has one 15-digit decimal at most that reads back as it, so the nearest
  -- one, its zeros stripped, is the shortest; a subnormal has fewer bits: try every length.
  local first = 15
  if math.abs(x) < 2.2250738585072014e-308 then first = 1 end
  for p = first, 17 do
    local s = format('%.' .. (p - 1) .. 'e', x)
    local ok = tonumber(s) == x
    if not ok and p == 16 and math.abs(math.frexp(x)) == 0.5 then
      -- A power of two has a narrower gap below it: the next 16 digits up may read back.
      local sg, d1, rest, e = string.match(s, '^(-?)(%d)%.(%d+)e([-+]%d+)$')
      local d = up(d1 .. rest)
      if d then
        local above = sg .. sub(d, 1, 1) .. '.' .. sub(d, 2) .. 'e' .. e
        if tonumber(above) == x then s, ok = above, true end
      end
    end
    if ok or p == 17 then
      local sg, d1, rest, e = string.match(s, '^(-?)(%d)%.?(%d*)e([-+]%d+)$')
      sign, digits, exp = sg, string.gsub(d1 .. rest, '0+$', ''), tonumber(e)
      break
    end
  end
  local len = #digits
  local kk = exp + 1
  local k = kk - len
  if k >= 0 and kk <= 16 then
    return sign .. digits .. string.rep('0', k) .. '.0'
  elseif kk > 0 and kk <= 16 then
    return sign .. sub(digits, 1, kk) .. '.' .. sub(digits, kk + 1)
  elseif kk > -5 and kk <= 0 then
    return sign .. '0.' .. string.rep('0', -kk) .. digits
  end
  local e = 'e' .. (kk > 0 and '+' or '') .. (kk - 1)
  if len == 1 then
    return sign .. digits .. e
  end
  return sign .. sub(digits, 1, 1) .. '.' .. sub(digits, 2) .. e
end

-- From 1e-4 up to 1e15 (every timestamp) %g writes the shortest digits in plain notation, as
-- serde_json does; the first length that reads back is the shortest (no power of two there needs
-- more digits than its exact decimal, which has 15 at most).
local function num(x)
  local a = x
  if a < 0 then a = -a end
  if a >= 1e-4 and a < 1e15 then
    local s = format('%.15g', x)
    if tonumber(s) ~= x then
      s = format('%.16g', x)
      if tonumber(s) ~= x then s = format('%.17g', x) end
    end
    if not find(s, '.', 1, true) then s = s .. '.0' end
    return s
  end
  return slow_num(x)
end

local VACATED = ',"vacated":true'
local LEAVES_OPEN, LEAVES_CLOSE = ',"reason":"expired","leaves":[', '],"timestamp":'
local TIMESTAMP = num(secs)

-- The roster as JSON: `json` (the members, no brackets) and `n`; `parts` and `ends` (where each
-- member's JSON ends, commas between counted) are made only when an event must cut it.
local function encode_roster(members)
  local n = #members
  if n == 0 then return { json = '', n = 0, parts = {} } end
  if not find(concat(members, ' '), NOT_PLAIN) then
    return { json = '"' .. concat(members, '","') .. '"', n = n, raw = members }
  end
  local parts = {}
  for i, m in ipairs(members) do parts[i] = str(m) end
  return { json = concat(parts, ','), n = n, parts = parts }
end

local function roster_ends(r)
  if not r.parts then
    r.parts = {}
    for i, m in ipairs(r.raw) do r.parts[i] = '"' .. m .. '"' end
  end
  local ends, at = {}, -1
  for i, part in ipairs(r.parts) do
    at = at + 1 + #part
    ends[i] = at
  end
  return ends
end

-- The bytes after the roster's members (see `EventEncoder::rest_len`).
local function rest_len(count, vacated_room)
  local n = #ROSTER_KEY + 2 + #COUNT_KEY + #count + CURSOR_ROOM + 1
  if vacated_room then n = n + #VACATED end
  return n
end

-- The roster cut to fit after `used` bytes, the count and the flags (no prev, no brace).
local function finish(used, r, card, vacated_room, vacated)
  local count = tostring(card)
  local tail = rest_len(count, vacated_room)
  local members, json = r.n, r.json
  if used + tail + #json > max_bytes then
    local ends = roster_ends(r)
    local room = max_bytes - (used + tail + #TRUNCATED)
    members = 0
    while members < r.n and ends[members + 1] <= room do members = members + 1 end
    json = concat(r.parts, ',', 1, members)
  end
  local out = ROSTER_KEY .. '[' .. json .. ']' .. COUNT_KEY .. count
  if members < r.n or members < math.min(card, ROSTER_FULL) then
    out = out .. TRUNCATED
  end
  if vacated then out = out .. VACATED end
  return out
end

-- The events of one key's step, without prev and closing brace: one per member, or batches.
local function bodies(conv, stale, got, roster, card)
  local vacated = card == 0
  local out = {}
  local covers = {}
  if not batch then
    local unit_ms = ARGV[2] == 'ms'
    for j = 1, got do
      local score = tonumber(stale[2 * j])
      if unit_ms then score = score / 1000 end
      local body = HEAD .. conv .. ',' .. field('user_id', stale[2 * j - 1])
        .. ',"reason":"expired","last_seen":' .. num(score) .. ',"timestamp":' .. TIMESTAMP
      local last = vacated and j == got
      out[j] = body .. finish(#body, roster, card, last, last)
      covers[j] = j
    end
    return out, covers
  end
  local items, item_ends, at = {}, {}, -1
  for j = 1, got do
    local score = tonumber(stale[2 * j])
    if ARGV[2] == 'ms' then score = score / 1000 end
    items[j] = '{' .. field('user_id', stale[2 * j - 1]) .. ',"last_seen":' .. num(score) .. '}'
    at = at + 1 + #items[j]
    item_ends[j] = at
  end
  local fixed = #HEAD + #conv + #LEAVES_OPEN + #LEAVES_CLOSE + #TIMESTAMP
    + rest_len(format('%d', card), vacated)
  local room = math.max(max_bytes - fixed, 0)
  room = room - math.min(#roster.json, math.floor(room / 2))
  local from, start = 1, 0
  while from <= got do
    local to = from
    while to < got and item_ends[to + 1] - start <= room do to = to + 1 end
    local last = to == got
    local body = HEAD .. conv .. LEAVES_OPEN .. concat(items, ',', from, to) .. LEAVES_CLOSE .. TIMESTAMP
    out[#out + 1] = body .. finish(#body, roster, card, vacated, vacated and last)
    covers[#covers + 1] = to
    start = item_ends[to] + 1
    from = to + 1
  end
  return out, covers
end

-- Streams ------------------------------------------------------------------------------------

local last_id = {}
local touched = {}

-- The id of the stream's last entry, or '0-0' for a stream that holds none: a new history.
local function prev_of(stream)
  if last_id[stream] then return last_id[stream] end
  local top = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if top.err then return nil, top.err end
  last_id[stream] = top[1] and top[1][1] or '0-0'
  return last_id[stream]
end

local function append(stream, json)
  if maxlen ~= '0' then
    return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'event', json)
  end
  return redis.pcall('XADD', stream, '*', 'event', json)
end

-- Trims by age and sets the key TTL once per stream and call (not per entry: that doubled the
-- cost).
local function touch(stream)
  if touched[stream] then return end
  touched[stream] = true
  if retention > 0 then
    redis.call('XTRIM', stream, 'MINID', '~', format('%.0f', now_ms - retention))
  end
  if stream_ttl ~= '0' then
    redis.call('PEXPIRE', stream, stream_ttl)
  end
end

-- Marks the stream due for each webhook, once per stream and call, before its first append: a
-- refused mark (an ACL) stops the key's step before anything is written, like a refused XADD.
-- A new mark is scored again with its first entry's id (`rescore`): an entry id's time may be
-- the call's start (Redis 7.2 on), a millisecond before TIME, and the webhook reads from there.
local marked, fresh = {}, {}
local function mark_due(stream)
  if marked[stream] then return nil end
  fresh[stream] = {}
  for _, due in ipairs(DUE) do
    local added = redis.pcall('ZADD', due, 'NX', now_ms, stream)
    if type(added) == 'table' and added.err then return added.err end
    if added == 1 then fresh[stream][#fresh[stream] + 1] = due end
  end
  marked[stream] = true
  return nil
end

local function rescore(stream, first_id)
  local ms = string.match(first_id, '^(%d+)-')
  for _, due in ipairs(fresh[stream] or {}) do
    redis.call('ZADD', due, 'XX', ms, stream)
  end
  fresh[stream] = {}
end

local results = {}
local stopped = false
for i = 1, #KEYS / 2 do
  local key, stream = KEYS[2 * i - 1], KEYS[2 * i]
  local conv, channel = ARGV[PER_KEY + 2 * i - 1], ARGV[PER_KEY + 2 * i]
  local stale = nil
  if budget > 0 and not stopped then
    stale = redis.pcall('ZRANGE', key, '-inf', below, 'BYSCORE', 'LIMIT', 0, budget, 'WITHSCORES')
  end
  if not stale then
    results[i] = { 2 }
  elseif stale.err then
    results[i] = { 3 }
  elseif #stale == 0 then
    local card = redis.call('ZCARD', key)
    local oldest = false
    if card > 0 and WANT_OLDEST then oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] end
    results[i] = { 0, card, oldest, {}, 0, 0 }
  else
    local got = #stale / 2
    local status = 0
    if got == budget then status = 1 end
    local card = redis.call('ZCARD', key) - got
    local roster = {}
    if card > 0 and roster_limit > 0 then
      roster = redis.call('ZRANGE', key, 0, math.min(roster_limit, card) - 1, 'REV')
    end
    budget = budget - got - #roster
    local events, covers = bodies(conv, stale, got, encode_roster(roster), card)
    local prev, err = prev_of(stream)
    if prev then
      err = mark_due(stream)
      if err then prev = nil end
    end
    local appended, ids, prevs = 0, {}, {}
    if prev then
      for j = 1, #events do
        local id = append(stream, events[j] .. ',"prev":"' .. prev .. '"}')
        if type(id) == 'table' and id.err then
          err = id.err
          break
        end
        ids[j], prevs[j], prev = id, prev, id
        appended = j
      end
      last_id[stream] = prev
      if appended > 0 then rescore(stream, ids[1]) end
    end
    local removed = 0
    if appended > 0 then
      removed = covers[appended]
      touch(stream)
      redis.call('ZREMRANGEBYRANK', key, 0, removed - 1)
    end
    local flat = {}
    for j = 1, 2 * removed do flat[j] = stale[j] end
    local published, unpublished = 0, 0
    if publish ~= '' then
      for j = 1, appended do
        local sent = redis.pcall(publish, channel,
          events[j] .. ',"prev":"' .. prevs[j] .. '","id":"' .. ids[j] .. '"}')
        if type(sent) == 'table' and sent.err then
          unpublished = unpublished + 1
        else
          published = published + 1
        end
      end
    end
    card = card + got - removed
    local oldest = false
    if card > 0 and WANT_OLDEST then oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] end
    if err then
      stopped = true
      results[i] = { 4, card, oldest, flat, published, unpublished, err }
    else
      if card == 0 then status = 0 end
      results[i] = { status, card, oldest, flat, published, unpublished }
    end
  end
end
return { format('%.17g', now), results }
