"""Rate limits counted in the shared cache (Redis in production), so that every web process and
worker counts together: a fixed window per key, incremented atomically."""

from __future__ import annotations

import math
import time

from django.core.cache import cache

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate_parse(rate: str) -> tuple[int, int]:
    """`"20/hour"` -> (20, 3600): a count and a period (second, minute, hour or day, by its
    first letter, as DRF's rates). A ValueError names a rate that is not one."""
    count, _, period = rate.partition("/")
    try:
        allowed = int(count)
        seconds = _PERIODS[period.strip()[:1].lower()]
    except (ValueError, KeyError):
        raise ValueError(f"not a rate such as 20/hour: {rate!r}") from None
    if allowed < 0:
        raise ValueError(f"not a rate such as 20/hour: {rate!r}")
    return allowed, seconds


def rate_limit_hit(key: str, rate: str) -> int | None:
    """Counts one request under `key`. None while the count stays within `rate`; past it, how
    many seconds until the window ends and requests are counted afresh."""
    allowed, period = rate_parse(rate)
    now = time.time()
    window = int(now // period)
    cache_key = f"ratelimit:{key}:{period}:{window}"
    cache.add(cache_key, 0, timeout=period + 1)
    try:
        count = cache.incr(cache_key)
    except ValueError:  # expired between add and incr: this request opens a new window
        cache.add(cache_key, 1, timeout=period + 1)
        count = 1
    if count <= allowed:
        return None
    return max(1, math.ceil((window + 1) * period - now))
