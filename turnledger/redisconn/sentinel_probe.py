"""Why no sentinel named a primary, asked of each sentinel ourselves: a refusal, or an outage.

redis-py's `Sentinel.discover_master` asks every sentinel, catches each one's error and raises one
`MasterNotFoundError` that keeps of them only their text: a sentinel that refused our login
(`requirepass` in sentinel.conf, and REDIS_SENTINEL_PASSWORD_FILE unset or wrong) looks like one that
is down, and a service would wait for ever for a password to become right. So where an outage may
still be told from a refusal, when a command starts (`client.explain`), where a one-shot command meets
it (`client.classified`) and where a service waits it out (`Rechecks`: the projector), every sentinel
is asked once more, at once, on a connection of its own with the settings and the password the client
gave it, `SENTINEL GET-MASTER-ADDR-BY-NAME SERVICE`, for at most `PROBE_TIMEOUT_S`; its error, if any,
is the real one. A sentinel that could not be asked (no answer in time, or an error that is none of
`REFUSALS`) is asked again, for at most `PROBE_TIMEOUT_S` more, whether it speaks the other protocol
than ours and whether it sends an alert about our client certificate (`looked_again`, with
`redisconn.probe`'s questions): a reset or a silence can be either.

The rule, over what the sentinels answered:

- any sentinel names an address for the service: an outage (it sees the primary down, or a failover
  is under way; redis-py asks `SENTINEL MASTERS` and wants the primary up);
- else any sentinel refused us (`REFUSALS`: our login; SENTINEL, to our user (`NOPERM`) or at all (a
  Redis, not a sentinel); our TLS: a certificate we cannot verify, our client certificate, a failed
  handshake; or, asked again (`looked_again`), it speaks the other protocol or refuses our client
  certificate): a refusal, `RedisSentinelAccessError`, the first such sentinel's, even when others could
  not be reached: the sentinels of one service share their password, their ACL and their TLS, so the
  setting is wrong, and an address that is no sentinel is wrong in the URL whatever the others do; the
  unreachable ones are named with it;
- else every sentinel answered and none monitors the service: a refusal too, as a URL naming a cluster
  node that is no cluster is (`refusals.CHECK_NOT_CLUSTER`): the URL names what these sentinels do not
  have, and waiting does not change it;
- else (some could not be reached, the rest do not monitor it): the outage, as the unreachable ones may.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import TypeVar

import redis.asyncio as aioredis
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import NoPermissionError, RedisError

from turnledger.errors import (
    RedisSentinelAccessError,
    RedisSentinelUnavailableError,
    TurnledgerError,
    described_cause,
)
from turnledger.redisconn.cluster import RedisClient
from turnledger.redisconn.naming import client_url, sentinel_addresses
from turnledger.redisconn.probe import certificate_refusal, other_protocol
from turnledger.redisconn.refusals import (
    CHECK_CERTIFICATE,
    CHECK_TLS,
    REFUSED_LOGIN,
    Check,
    Match,
    caused_by,
    classify,
    client_certificate_check,
    in_chain,
    of_type,
    response_starting,
)
from turnledger.redisconn.settings import ENV_PASSWORD_FILE, ENV_SENTINEL_PASSWORD_FILE, ENV_URL
from turnledger.tls_alerts import certificate_alert

T = TypeVar("T")

PROBE_TIMEOUT_S = 3.0
"""Each sentinel's answer, login included, and as long again for one that could not be asked
(`looked_again`); the sentinels are asked at once, so twice this bounds the probe."""

RECHECK_EVERY_S = 30.0
"""While one sentinel outage lasts, how often a caller that waits it out asks the sentinels again
(`Rechecks`): a refusal that begins during it (a password changed under a running projector) ends the
wait within this long, and sentinels that are down are not asked on every retry (each time is a
connection to every sentinel, and up to twice `PROBE_TIMEOUT_S`)."""

CHECK_SENTINEL_LOGIN = (
    f"Put the sentinels' own password (`requirepass` in sentinel.conf) in {ENV_SENTINEL_PASSWORD_FILE}, or "
    f"unset it for sentinels that require none; a password in {ENV_URL} or {ENV_PASSWORD_FILE} is the Redis "
    "nodes' login, not the sentinels'."
)
CHECK_SENTINEL_PERMISSIONS = (
    f"The sentinels' default user (the one {ENV_SENTINEL_PASSWORD_FILE}'s password logs in as) may not run "
    "the SENTINEL commands turnledger asks: allow it `+sentinel|masters +sentinel|get-master-addr-by-name` "
    "(or `+@all`) in each sentinel's ACL (`user default ...` in sentinel.conf, or ACL SETUSER)."
)
CHECK_NOT_SENTINEL = (
    f"A redis+sentinel:// URL names sentinels (their port, 26379 by default), not Redis nodes: put the "
    f"sentinels' HOST:PORT in {ENV_URL}, or name this Redis itself with redis:// (rediss:// for TLS)."
)
CHECK_SENTINEL_PLAINTEXT_PORT = (
    f"This sentinel's port speaks plaintext, not TLS: rediss+sentinel:// speaks TLS to the sentinels and the "
    f"nodes alike; use redis+sentinel:// in {ENV_URL} for sentinels without TLS, or their TLS port."
)
CHECK_SENTINEL_TLS_PORT = (
    f"This sentinel's port speaks TLS: use rediss+sentinel:// in {ENV_URL} (with REDIS_SSL_CA_FILE for a "
    "private CA), or the sentinels' plaintext port."
)
SENT_PASSWORD = {False: "without a password", True: f"with the password of {ENV_SENTINEL_PASSWORD_FILE}"}


def check_service(service: str) -> str:
    return (
        f"Name in {ENV_URL} a service they monitor (redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]; "
        f"`SENTINEL MASTERS` on a sentinel lists them), or have them monitor {service!r} "
        f"(`sentinel monitor {service} HOST PORT QUORUM`)."
    )


@dataclass(frozen=True)
class Refusal:
    match: Match
    said: str
    """What the sentinel did, `{login}` being how we logged in (`SENT_PASSWORD`)."""
    fix: str | Check
    """What to check, or how to tell it from the sentinel's client (`refusals.client_certificate_check`)."""


REFUSALS: tuple[Refusal, ...] = (
    *(Refusal(match, "refused our login {login}", CHECK_SENTINEL_LOGIN) for match in REFUSED_LOGIN),
    Refusal(
        of_type(NoPermissionError),
        "took our login {login} but may not let it run SENTINEL",
        CHECK_SENTINEL_PERMISSIONS,
    ),
    Refusal(
        response_starting("unknown command 'SENTINEL'", "unknown command `SENTINEL`"),
        "is a Redis, not a sentinel",
        CHECK_NOT_SENTINEL,
    ),
    Refusal(
        caused_by(ssl.SSLCertVerificationError), "sent a certificate we cannot verify", CHECK_CERTIFICATE
    ),
    Refusal(in_chain(certificate_alert), "refused our client certificate", client_certificate_check),
    Refusal(
        caused_by(ssl.SSLError, ssl.SSLEOFError, ssl.SSLZeroReturnError),
        "failed the TLS handshake",
        CHECK_TLS,
    ),
)
"""A sentinel's errors that waiting does not mend, read top down, each with what to check: the refusal
rules of `refusals.RULES` that a sentinel can answer with (its login; `NOPERM`, said of a sentinel's
ACL; a certificate we cannot verify, an alert about ours, a handshake that failed other than by an
EOF), and SENTINEL unknown: a Redis, not a sentinel."""

OTHER_PROTOCOL = {
    True: ("speaks plaintext, not TLS (in TLS: {happened})", CHECK_SENTINEL_PLAINTEXT_PORT),
    False: ("speaks TLS, not plaintext (in plaintext: {happened})", CHECK_SENTINEL_TLS_PORT),
}
"""By whether we spoke TLS to it: what a sentinel that answers in the other protocol does, `{happened}`
being what our own protocol met, and the fix."""


class Said(Enum):
    PRIMARY = auto()
    NO_SUCH_SERVICE = auto()
    REFUSED = auto()
    NOTHING = auto()
    """It could not be asked: unreachable, silent, or an answer that is none of the above."""


@dataclass(frozen=True)
class Answer:
    sentinel: str
    said: Said
    text: str
    """What it said, as the message says it: `HOST:PORT does not monitor 'mymaster'`."""
    error: BaseException | None = None
    fix: str | None = None


async def sentinel_refusal(client: RedisClient, exc: BaseException) -> RedisSentinelAccessError | None:
    """The refusal behind `exc`, a `MasterNotFoundError` of `client`'s, when its sentinels say there is
    one (the module's rule); None for an outage, or a client that asks no sentinels."""
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, SentinelConnectionPool):
        return None
    service = pool.service_name
    sentinels = pool.sentinel_manager.sentinels
    answers = await asyncio.gather(
        *(
            ask(sentinel, address, service)
            for sentinel, address in zip(sentinels, sentinel_addresses(pool), strict=True)
        )
    )
    return judge(client_url(client), service, answers, exc)


def judge(
    url: str, service: str, answers: Sequence[Answer], exc: BaseException
) -> RedisSentinelAccessError | None:
    """The module's rule: the refusal the sentinels' `answers` make, or None for the outage."""
    if not answers or any(answer.said is Said.PRIMARY for answer in answers):
        return None
    said = [answer.text for answer in answers]
    refused = [answer for answer in answers if answer.said is Said.REFUSED]
    if refused and refused[0].error is not None and refused[0].fix is not None:
        return RedisSentinelAccessError(url, service, said, refused[0].error, refused[0].fix)
    if all(answer.said is Said.NO_SUCH_SERVICE for answer in answers):
        return RedisSentinelAccessError(url, service, said, exc, check_service(service))
    return None


async def ask(sentinel: aioredis.Redis, address: str, service: str) -> Answer:
    """`SENTINEL GET-MASTER-ADDR-BY-NAME service` of one sentinel, on a connection of its own with the
    settings of the client's (TLS, timeouts, password), closed after; of one that could not be asked,
    the other protocol and a client certificate alert (`looked_again`)."""
    kwargs = sentinel.connection_pool.connection_kwargs
    pool = aioredis.ConnectionPool(connection_class=sentinel.connection_pool.connection_class, **kwargs)
    probe = aioredis.Redis.from_pool(pool)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            try:
                reply = await probe.sentinel_get_master_addr_by_name(service)
            finally:
                await probe.aclose()
    except TimeoutError as error:
        silent = Answer(address, Said.NOTHING, f"{address} did not answer within {PROBE_TIMEOUT_S:g}s")
        return await looked_again(sentinel, silent, error, f"no answer within {PROBE_TIMEOUT_S:g}s")
    except (RedisError, OSError) as error:
        answer = refused(sentinel, address, error)
        if answer.said is not Said.NOTHING:
            return answer
        return await looked_again(sentinel, answer, error, cause_of(error))
    if not reply:  # nil: no such master
        return Answer(address, Said.NO_SUCH_SERVICE, f"{address} does not monitor {service!r}")
    return Answer(address, Said.PRIMARY, f"{address} names a primary for {service!r}")


def refused(sentinel: aioredis.Redis, address: str, error: BaseException) -> Answer:
    """What a sentinel's error says: the first of `REFUSALS` it matches, or that it could not be asked."""
    cause = cause_of(error)
    sent_password = sentinel.connection_pool.connection_kwargs.get("password") is not None
    for refusal in REFUSALS:
        reported = refusal.match(error)
        if reported is not None:
            said = refusal.said.format(login=SENT_PASSWORD[sent_password])
            fix = refusal.fix if isinstance(refusal.fix, str) else refusal.fix(sentinel)
            return Answer(address, Said.REFUSED, f"{address} {said} ({cause})", reported, fix)
    return Answer(address, Said.NOTHING, f"{address} could not be asked ({cause})", error)


def cause_of(error: BaseException) -> str:
    """`error` as an answer says it, in parentheses: its type and text, without a closing period."""
    return described_cause(error).rstrip(".")


async def looked_again(
    sentinel: aioredis.Redis, answer: Answer, error: BaseException, happened: str
) -> Answer:
    """`answer`, of a sentinel that could not be asked (`error`: what `happened`), or the refusal it
    turns out to be when asked for at most `PROBE_TIMEOUT_S` more: a TLS client's silence or reset from
    a plaintext port, a plaintext client's reset from a TLS port (`probe.other_protocol`), or a client
    certificate refused with an alert the reset lost (`probe.certificate_refusal`)."""
    kwargs = sentinel.connection_pool.connection_kwargs
    host, port = str(kwargs["host"]), int(kwargs["port"])
    tls = issubclass(sentinel.connection_pool.connection_class, aioredis.SSLConnection)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            if await other_protocol(host, port, tls=tls) is not None:
                said, fix = OTHER_PROTOCOL[tls]
                text = f"{answer.sentinel} {said.format(happened=happened)}"
                return Answer(answer.sentinel, Said.REFUSED, text, error, fix)
            alert = await certificate_refusal(sentinel, host, port)
    except TimeoutError:
        return answer
    return answer if alert is None else refused(sentinel, answer.sentinel, alert)


class Rechecks:
    """Sentinel outages asked why where they are waited out (`sentinel_refusal`): at the first sighting
    of one, then at most every `RECHECK_EVERY_S` while it lasts; a command that went through (`passed`)
    ends it, so that the next is asked at once. `clock` is `time.monotonic` unless a test gives another."""

    def __init__(self, client: RedisClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self.asked_at: float | None = None

    async def refusal(
        self, outage: TurnledgerError | None, exc: BaseException
    ) -> RedisSentinelAccessError | None:
        """The refusal that `outage`, what `exc` was classified as, turns out to be, when it is a
        sentinel outage and its sentinels are due to be asked; else None."""
        if not isinstance(outage, RedisSentinelUnavailableError):
            return None
        now = self.clock()
        if self.asked_at is not None and now - self.asked_at < RECHECK_EVERY_S:
            return None
        self.asked_at = now
        return await sentinel_refusal(self.client, outage.cause or exc)

    def asked(self, outage: TurnledgerError | None) -> None:
        """`outage` was asked why already (`client.diagnose`, just before the caller waits): a sentinel
        outage's sentinels are asked next `RECHECK_EVERY_S` from now, not again at its first sighting."""
        if isinstance(outage, RedisSentinelUnavailableError):
            self.asked_at = self.clock()

    def passed(self) -> None:
        self.asked_at = None

    def attempting(self, attempt: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """`attempt` for `retry.ride_out` with a `refusals.classify` classifier: a sentinel outage
        that turns out a refusal raises that refusal instead, which ride_out raises at once."""

        async def attempted() -> T:
            try:
                result = await attempt()
            except Exception as exc:
                refusal = await self.refusal(classify(exc, self.client), exc)
                if refusal is None:
                    raise
                raise refusal from exc
            self.passed()
            return result

        return attempted
