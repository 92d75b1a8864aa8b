"""Django's Redis cache, keeping its Redis client.

Django's `RedisCacheClient` keeps a connection pool per server but builds a new `redis.Redis`
client around it for every command, and each build fills the client's table of about 170
response callbacks: half a millisecond of the offers list's CPU per request, for one cached
token. This client builds each server's `redis.Redis` once and reuses it, over the same pool;
the cache itself stays one per thread, as Django makes it."""

from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient


class RedisCacheClient(DjangoRedisCacheClient):
    # Django's own, which its type stubs leave out.
    _client: Any
    _get_connection_pool: Callable[[bool], Any]

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
