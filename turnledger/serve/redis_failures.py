"""What `serve` answers when a Redis command fails mid-run, and what it tells the operator.

redis-py raises a refused login as `AuthenticationError`, a `ConnectionError`, and a user that lost
its permissions as `NoPermissionError`, a `ResponseError`: a password rotated under a running `serve`,
or an ACL user disabled, used to be answered as a plain outage (503 with redis-py's text) or as a bare
500. `redisconn.refusals.classify` tells them apart: a refusal is answered 503 with what to check (the
URL without its password) and logged at ERROR, once a minute per message at most, since only the
operator can fix it; an outage is answered 503 as before; any other Redis error is not ours to judge
and propagates (a 500, with its traceback in the log). A cluster client's own errors
(`RedisClusterException`, no `RedisError`: no node of the cluster answers) are judged alike.

An open event stream whose Redis fails is ended with the same error (`stream_ended`) and logged, an
outage at WARNING and a refusal at ERROR, once a minute per message: every page's stream ends at once.

Sentinels that name no primary are answered as an outage, 503, without asking them why
(`redisconn.sentinel_probe`, as the projector and the one-shot commands do): `answer` is synchronous,
called for each failed request, and a refusal would be a 503 as well; `serve` asked them once already,
at its start (`redisconn.client.connect`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisClusterException, RedisError

from turnledger.errors import RedisAccessError, RedisUnavailableError
from turnledger.redisconn.cluster import RedisClient
from turnledger.redisconn.refusals import classify

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0
"""The same refusal is logged again after this long, so a log shows it is still going on."""


class RedisFailures:
    """Classifies a failed command of `serve`'s client and logs refusals, at most once per
    `LOG_EVERY_S` per message (`clock` is `time.monotonic` unless a test gives another)."""

    def __init__(self, redis: RedisClient, clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._clock = clock
        self._logged_at: dict[str, float] = {}

    def answer(self, exc: RedisError | RedisClusterException) -> tuple[int, str]:
        """The status and the error text to answer with; re-raises `exc` when it is neither a refusal
        nor an outage."""
        failure = classify(exc, self._redis)
        if isinstance(failure, RedisAccessError):
            self._log(str(failure))
            return 503, str(failure)
        if isinstance(failure, RedisUnavailableError):
            return 503, str(exc)
        raise exc

    def stream_ended(self, exc: RedisError | RedisClusterException) -> str:
        """The error an event stream that `exc` ended tells its client (`answer`'s); logs the end.
        Re-raises `exc` when it is neither a refusal nor an outage."""
        failure = classify(exc, self._redis)
        if not isinstance(failure, RedisAccessError | RedisUnavailableError):
            raise exc
        refused = isinstance(failure, RedisAccessError)
        message = f"event streams end, their clients resume once Redis answers: {failure}"
        self._log(message, logging.ERROR if refused else logging.WARNING)
        return str(failure) if refused else str(exc)

    def _log(self, message: str, level: int = logging.ERROR) -> None:
        now = self._clock()
        last = self._logged_at.get(message)
        if last is not None and now - last < LOG_EVERY_S:
            return
        self._logged_at[message] = now
        log.log(level, "serve: %s", message)
