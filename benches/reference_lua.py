#!/usr/bin/env python3
"""The reference design the performance issue measures against, for a same-run comparison.

One pass: SCAN MATCH <pattern> COUNT 1000 TYPE zset, and per page one pipeline of Lua calls of
50 keys each; each call reads TIME, removes every member older than the ttl
(ZRANGE BYSCORE LIMIT, then ZREM) and PUBLISHes one cjson-encoded leave event per removed member
(without a roster, so it does less than presence-sweeper does). Written for the benchmark from the
issue's description; it is not part of presence-sweeper.

usage: reference_lua.py PORT [MATCH] [TTL_SECONDS]
needs: pip install redis
prints: reference keys=N evicted=N secs=S keys_per_s=R
"""
import sys
import time

from redis import Redis

SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local below = '(' .. string.format('%.6f', now - tonumber(ARGV[1]))
local evicted = 0
for _, key in ipairs(KEYS) do
  local stale = redis.call('ZRANGE', key, '-inf', below, 'BYSCORE', 'LIMIT', 0, 1000, 'WITHSCORES')
  if #stale > 0 then
    local members = {}
    for i = 1, #stale, 2 do members[#members + 1] = stale[i] end
    redis.call('ZREM', key, unpack(members))
    local conv = string.sub(key, 10, -8)
    local channel = 'presence:' .. conv .. ':events'
    for i = 1, #stale, 2 do
      redis.call('PUBLISH', channel, cjson.encode({
        type = 'presence.leave', conversation_id = conv, user_id = stale[i],
        reason = 'expired', last_seen = tonumber(stale[i + 1]), timestamp = now}))
      evicted = evicted + 1
    end
  end
end
return evicted
"""


def main(port, pattern, ttl):
    r = Redis(port=port)
    sha = r.script_load(SCRIPT)
    t0 = time.time()
    keys = evicted = 0
    cursor = 0
    while True:
        cursor, page = r.scan(cursor, match=pattern, count=1000, _type="zset")
        if page:
            pipe = r.pipeline(transaction=False)
            for i in range(0, len(page), 50):
                chunk = page[i:i + 50]
                pipe.evalsha(sha, len(chunk), *chunk, ttl)
            evicted += sum(pipe.execute())
            keys += len(page)
        if cursor == 0:
            break
    dt = time.time() - t0
    print(f"reference keys={keys} evicted={evicted} secs={dt:.3f} keys_per_s={keys / dt:.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]),
         sys.argv[2] if len(sys.argv) > 2 else "presence:*:online",
         float(sys.argv[3]) if len(sys.argv) > 3 else 45)
