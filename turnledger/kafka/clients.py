"""Building and starting aiokafka clients with turnledger's shared settings, riding out outages.

Consumers always read `read_committed` with auto-commit off: every reader of turnledger's topics
acts only on what a processor transaction committed, and decides itself where its position lives
(the processor in its transactions, the projector in Redis, the replay tools nowhere).

A client whose `start()` failed is not reused: each attempt builds a fresh one, because aiokafka
leaves a half-started client in an unspecified state.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, ProducerFenced

from turnledger.errors import KafkaUnavailableError, ServiceUnavailable
from turnledger.kafka.connection import diagnose, kafka_options
from turnledger.retry import NO_WAIT, Backoff, Classify, StopRequested, ride_out

log = logging.getLogger(__name__)

READ_COMMITTED: dict[str, Any] = {
    "isolation_level": "read_committed",
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}


LOCAL_FILE_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
LOCAL_FILE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT})
"""`OSError`s of this machine's files and disks: no broker coming back ends them. Waiting one out as a
Kafka outage would blame Kafka, for ever (a state dir that could not be made did, session 39)."""


def local_file_error(exc: BaseException) -> bool:
    return isinstance(exc, LOCAL_FILE_ERRORS) or (isinstance(exc, OSError) and exc.errno in LOCAL_FILE_ERRNOS)


def kafka_outage(bootstrap: str, action: str) -> Classify:
    """Classifier for `ride_out`: connection losses, timeouts and the broker's retriable errors
    (leader or coordinator moving, loading after a restart) are outages; a fenced producer, an
    error of local files (`LOCAL_FILE_ERRORS`) and every other error are not."""

    def classify(exc: BaseException) -> ServiceUnavailable | None:
        if isinstance(exc, KafkaUnavailableError):
            return exc
        if isinstance(exc, ProducerFenced) or local_file_error(exc):
            return None
        transient = (KafkaConnectionError, KafkaTimeoutError, TimeoutError, ConnectionError, OSError)
        if isinstance(exc, transient) or (isinstance(exc, KafkaError) and exc.retriable):
            return KafkaUnavailableError(bootstrap, exc, action=action)
        return None

    return classify


def read_committed_consumer(
    bootstrap: str,
    *,
    group_id: str | None = None,
    client_id: str = "turnledger",
    consumer: Callable[..., AIOKafkaConsumer] | None = None,
    **options: Any,
) -> AIOKafkaConsumer:
    """A consumer (not started) that only sees committed transactional data; `options` override
    or extend aiokafka's keyword arguments (fetch sizes, session timeout, assignors). `consumer`:
    the class, a subclass of aiokafka's (`group_member.GroupMemberConsumer`); None: aiokafka's."""
    return (consumer or AIOKafkaConsumer)(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=client_id,
        **{**READ_COMMITTED, **kafka_options(), **options},
    )


def transactional_producer(
    bootstrap: str,
    transactional_id: str,
    *,
    transaction_timeout_ms: int,
    retry_backoff_ms: int = 100,
    max_batch_size: int = 16384,
) -> AIOKafkaProducer:
    """A producer (not started) whose `start()` runs InitProducerId for `transactional_id`: that
    fences every earlier producer with the same id and completes its open transaction."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        enable_idempotence=True,
        acks="all",
        retry_backoff_ms=retry_backoff_ms,
        max_batch_size=max_batch_size,
        **kafka_options(),
    )


class _Client(Protocol):
    async def start(self) -> None: ...


C = TypeVar("C", bound=_Client)


LEAVE_WITHIN_S = 5.0
"""How long a group member's consumer may take to stop on the way out (`close_client`)."""


async def close_client(client: object, within_s: float | None = None) -> None:
    """Stop a consumer or producer, close an admin client; never raises (used on the way out).

    `within_s`: give up waiting after that long (None: wait as long as it takes). A consumer in a
    group sends LeaveGroup when it stops. When the whole event loop is being cancelled (a host's
    `asyncio.run` ending), aiokafka's own tasks are cancelled too and that request waits out its
    40 s timeout; a member that leaves without it is dealt out after its session timeout, as after
    a crash."""
    closer = getattr(client, "stop", None) or getattr(client, "close", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(closer(), within_s)


async def start_client(
    make: Callable[[], C],
    *,
    bootstrap: str,
    action: str,
    backoff: Backoff = NO_WAIT,
    stop: asyncio.Event | None = None,
) -> C:
    """`make()` a client and start it, retrying with a fresh one while Kafka is unavailable; a
    `KafkaAccessError` (Kafka refused our login or our TLS: `connection.diagnose`) ends the wait.

    `action` says what the client is for ("start the processor's consumer"); it is part of the
    log lines while waiting and of the `KafkaUnavailableError` when giving up."""

    async def attempt() -> C:
        client = make()
        try:
            await client.start()
        except BaseException as exc:
            await close_client(client)
            if isinstance(exc, KafkaConnectionError):
                # a refused login or certificate: no outage to wait out; a KDC down, or what stopped
                # each address's connection: the outage's cause
                cause = await diagnose(bootstrap)
                if cause is not None:
                    raise cause from exc
            raise
        return client

    return await ride_out(
        attempt,
        waiting_for=f"Kafka at {bootstrap} to {action}",
        classify=kafka_outage(bootstrap, action),
        backoff=backoff,
        stop=stop,
    )


async def describe_partitions(
    bootstrap: str, topic: str, *, backoff: Backoff = NO_WAIT, stop: asyncio.Event | None = None
) -> list[int]:
    """The partition numbers of `topic` (empty when it does not exist), asked of the cluster's admin API."""
    action = f"describe topic {topic!r}"

    async def attempt() -> list[int]:
        admin = await start_client(
            lambda: AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options()),
            bootstrap=bootstrap,
            action=action,
        )
        try:
            described = await admin.describe_topics([topic])
        finally:
            await close_client(admin)
        return sorted(p["partition"] for t in described if t["error_code"] == 0 for p in t["partitions"])

    return await ride_out(
        attempt,
        waiting_for=f"Kafka at {bootstrap} to {action}",
        classify=kafka_outage(bootstrap, action),
        backoff=backoff,
        stop=stop,
    )


async def wait_for_topics(
    bootstrap: str,
    topics: Sequence[str],
    *,
    backoff: Backoff,
    stop: asyncio.Event | None = None,
    hint: str = "create them with `turnledger process --create-topics N`",
) -> None:
    """Return once every topic exists, logging what is missing while waiting (a service may well start
    before whoever creates its topics); Kafka outages meanwhile are ridden out as `backoff` says."""
    delays = Backoff(initial_s=0.5, max_s=5.0).delays()
    while True:
        missing = [
            t for t in topics if not await describe_partitions(bootstrap, t, backoff=backoff, stop=stop)
        ]
        if not missing:
            return
        delay = next(delays)
        log.warning(
            "waiting for topics %s to be created on %s (%s); next look in %.1fs",
            missing,
            bootstrap,
            hint,
            delay,
        )
        if stop is None:
            await asyncio.sleep(delay)
            continue
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
        except TimeoutError:
            continue
        raise StopRequested("stop requested while waiting for topics")


async def start_topic_reader(
    make: Callable[[], C],
    *,
    bootstrap: str,
    topic: str,
    backoff: Backoff,
    stop: asyncio.Event,
    hint: str = "the processor creates it",
) -> C:
    """`start_client` for a reader of `topic` that a service follows, then wait until the topic exists
    (stopped again if the wait ends otherwise)."""
    client = await start_client(
        make, bootstrap=bootstrap, action=f"read {topic!r}", backoff=backoff, stop=stop
    )
    try:
        await wait_for_topics(bootstrap, [topic], backoff=backoff, stop=stop, hint=hint)
    except BaseException:
        await close_client(client)
        raise
    return client


async def step_until_stopped(
    step: Callable[[], Awaitable[None]], *, bootstrap: str, topic: str, backoff: Backoff, stop: asyncio.Event
) -> None:
    """Run `step` (one fetch of `topic` and what follows it) again and again until `stop` is set, riding
    out Kafka outages as `backoff` says."""
    classify = kafka_outage(bootstrap, f"read {topic!r}")
    while not stop.is_set():
        await ride_out(
            step,
            waiting_for=f"Kafka at {bootstrap} to read {topic!r}",
            classify=classify,
            backoff=backoff,
            stop=stop,
        )
