#!/usr/bin/env python3
"""The baseline presence-sweeper is measured against: the cleanup an app would otherwise run
itself, as a periodic task, the way presence tutorials write it.

One pass over the keys SCAN finds (MATCH, COUNT 1000, TYPE zset). For each key, in turn and
each call awaited before the next:
  - ZRANGEBYSCORE key -inf <cutoff>, the cutoff taken from the app server's own clock;
  - ZREM of those ids (a separate command: a heartbeat landing in between is lost, its user
    announced as gone);
  - one PUBLISH of a small JSON leave event per removed id.

Written for the benchmark; it is not part of presence-sweeper.

usage: baseline.py PORT [MATCH] [TTL_SECONDS]
needs: redis-py (pip install redis)
prints: baseline keys=N evicted=N secs=S keys_per_s=R
"""

import asyncio
import json
import sys
import time

from redis.asyncio import Redis


async def cleanup_stale(redis, key, ttl):
    """Removes the members of `key` not seen for `ttl` seconds; returns their ids."""
    cutoff = time.time() - ttl
    gone = [m.decode() for m in await redis.zrangebyscore(key, "-inf", cutoff)]
    if gone:
        await redis.zrem(key, *gone)
    return gone


def conversation_of(key):
    """`presence:<id>:online` -> `<id>`."""
    return key.split(":", 1)[1].rsplit(":", 1)[0]


async def one_pass(port, match, ttl):
    redis = Redis(host="127.0.0.1", port=port)
    started = time.time()
    keys = evicted = 0
    async for raw in redis.scan_iter(match=match, count=1000, _type="zset"):
        key = raw.decode()
        keys += 1
        conversation = conversation_of(key)
        for user in await cleanup_stale(redis, key, ttl):
            event = {"type": "presence.leave", "conversation_id": conversation, "user_id": user,
                     "timestamp": time.time()}
            await redis.publish(f"presence:{conversation}:events", json.dumps(event))
            evicted += 1
    secs = time.time() - started
    await redis.aclose()
    print(f"baseline keys={keys} evicted={evicted} secs={secs:.3f} keys_per_s={keys / secs:.0f}")


if __name__ == "__main__":
    asyncio.run(one_pass(int(sys.argv[1]),
                         sys.argv[2] if len(sys.argv) > 2 else "presence:*:online",
                         float(sys.argv[3]) if len(sys.argv) > 3 else 45.0))
