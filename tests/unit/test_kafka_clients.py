"""`kafka/clients.py` without a broker: which errors are outages, the settings every client is built
with, a fresh client for every start attempt (a failed one closed), the admin's partitions, the wait for
topics and the step loop. The same calls against the real broker run in every integration test."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Coroutine
from typing import Any

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NotLeaderForPartitionError,
    ProducerFenced,
    UnknownTopicOrPartitionError,
)

from tests.unit.recorded_asyncio import RecordedAsyncio, record_asyncio
from turnledger import retry
from turnledger.errors import KafkaUnavailableError
from turnledger.kafka import clients
from turnledger.kafka.clients import (
    LEAVE_WITHIN_S,
    LOCAL_FILE_ERRNOS,
    LOCAL_FILE_ERRORS,
    READ_COMMITTED,
    close_client,
    describe_partitions,
    kafka_outage,
    local_file_error,
    read_committed_consumer,
    start_client,
    start_topic_reader,
    step_until_stopped,
    transactional_producer,
    wait_for_topics,
)
from turnledger.kafka.kerberos import KdcUnavailable
from turnledger.retry import Backoff, StopRequested

BOOTSTRAP = "k1:9092,k2:9092"
QUICK = Backoff(initial_s=0.001, max_s=0.001, jitter=0)
SECURITY = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}


@pytest.fixture(autouse=True)
def security(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client gets the process's security options (`connection.kafka_options`)."""
    monkeypatch.setattr(clients, "kafka_options", lambda: dict(SECURITY))


# ------------------------------------------------------------------------------------ kafka_outage


@pytest.mark.parametrize(
    "exc",
    [
        KafkaConnectionError("gone"),
        KafkaTimeoutError(),
        TimeoutError(),
        ConnectionResetError("reset"),
        OSError("network unreachable"),
        NotLeaderForPartitionError(),  # retriable: the leader moves
        UnknownTopicOrPartitionError(),  # retriable: a topic just created, not yet known everywhere
    ],
    ids=["connection", "kafka-timeout", "timeout", "reset", "oserror", "leader", "unknown-topic"],
)
def test_connection_losses_timeouts_and_retriable_errors_are_outages_of_the_action(
    exc: BaseException,
) -> None:
    outage = kafka_outage(BOOTSTRAP, "read 'x'")(exc)
    assert isinstance(outage, KafkaUnavailableError)
    assert (outage.bootstrap, outage.action, outage.cause) == (BOOTSTRAP, "read 'x'", exc)


def test_an_outage_already_typed_is_its_own_answer() -> None:
    typed = KafkaUnavailableError("elsewhere:1", action="write")
    assert kafka_outage(BOOTSTRAP, "read")(typed) is typed


@pytest.mark.parametrize(
    "exc",
    [ProducerFenced(), GroupAuthorizationFailedError(), ValueError("bad"), KeyError("x")],
    ids=["fenced", "refused", "value", "key"],
)
def test_fencing_refusals_and_everything_else_are_not_outages(exc: BaseException) -> None:
    assert kafka_outage(BOOTSTRAP, "read")(exc) is None


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError(errno.ENOENT, "No such file or directory", "/state/p-0"),
        FileExistsError(errno.EEXIST, "File exists", "/state"),
        IsADirectoryError(errno.EISDIR, "Is a directory", "/state/p-0.db"),
        NotADirectoryError(errno.ENOTDIR, "Not a directory", "/state/p-0"),
        PermissionError(errno.EACCES, "Permission denied", "/state"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
    ids=["missing", "exists", "is-dir", "not-dir", "permission", "disk-full", "read-only", "quota"],
)
def test_errors_of_local_files_are_no_kafka_outage(exc: OSError) -> None:
    assert kafka_outage(BOOTSTRAP, "start partition 0")(exc) is None


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 9092)"),
        OSError(errno.ENETUNREACH, "Network is unreachable"),
        OSError(errno.EHOSTUNREACH, "No route to host"),
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
    ],
    ids=["refused", "net-unreachable", "host-unreachable", "dns"],
)
def test_network_oserrors_with_their_errno_are_outages(exc: OSError) -> None:
    assert isinstance(kafka_outage(BOOTSTRAP, "read")(exc), KafkaUnavailableError)


def test_the_local_file_errors_are_the_missing_existing_directory_and_permission_errors() -> None:
    assert (
        FileNotFoundError,
        FileExistsError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    ) == LOCAL_FILE_ERRORS
    assert {errno.ENOSPC, errno.EROFS, errno.EDQUOT} == LOCAL_FILE_ERRNOS


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError("no errno at all"),
        PermissionError(errno.EPERM, "Operation not permitted"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
    ids=["typed-without-errno", "permission", "disk-full", "read-only", "quota"],
)
def test_a_local_file_error_is_told_by_its_type_or_its_errno(exc: OSError) -> None:
    assert local_file_error(exc) is True


@pytest.mark.parametrize(
    "exc",
    [
        OSError("no errno"),
        OSError(errno.ECONNREFUSED, "Connect call failed"),
        ConnectionResetError(errno.ECONNRESET, "reset"),
        TimeoutError(),
        ValueError("bad"),
        KafkaConnectionError("gone"),
    ],
    ids=["bare-oserror", "refused", "reset", "timeout", "value", "kafka"],
)
def test_network_errors_and_non_oserrors_are_no_local_file_error(exc: BaseException) -> None:
    assert local_file_error(exc) is False


def test_a_fenced_producer_is_no_outage_although_kafka_calls_it_retriable() -> None:
    fenced = ProducerFenced()
    fenced.retriable = True  # type: ignore[misc]
    assert kafka_outage(BOOTSTRAP, "commit")(fenced) is None


# ------------------------------------------------------------------------------------ the settings


class Recorded:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_a_consumer_reads_committed_data_only_and_takes_the_security_and_the_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clients, "AIOKafkaConsumer", Recorded)
    plain = read_committed_consumer(BOOTSTRAP)
    assert plain.kwargs == {  # type: ignore[attr-defined]
        "bootstrap_servers": BOOTSTRAP,
        "group_id": None,
        "client_id": "turnledger",
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        **SECURITY,
    }
    tuned = read_committed_consumer(
        BOOTSTRAP, group_id="g", client_id="c", auto_offset_reset="latest", max_poll_records=7
    )
    assert tuned.kwargs == {  # type: ignore[attr-defined]
        **plain.kwargs,  # type: ignore[attr-defined]
        "group_id": "g",
        "client_id": "c",
        "auto_offset_reset": "latest",
        "max_poll_records": 7,
    }
    assert READ_COMMITTED == {
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
    }


def test_a_transactional_producer_is_idempotent_with_acks_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "AIOKafkaProducer", Recorded)
    producer = transactional_producer(BOOTSTRAP, "app-t-0", transaction_timeout_ms=60_000)
    assert producer.kwargs == {  # type: ignore[attr-defined]
        "bootstrap_servers": BOOTSTRAP,
        "transactional_id": "app-t-0",
        "transaction_timeout_ms": 60_000,
        "enable_idempotence": True,
        "acks": "all",
        "retry_backoff_ms": 100,
        "max_batch_size": 16384,
        **SECURITY,
    }
    tuned = transactional_producer(
        BOOTSTRAP, "x", transaction_timeout_ms=1, retry_backoff_ms=20, max_batch_size=512
    )
    assert (tuned.kwargs["retry_backoff_ms"], tuned.kwargs["max_batch_size"]) == (20, 512)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------ close_client


class Stoppable:
    def __init__(self, fail: BaseException | None = None, hang: bool = False) -> None:
        self.fail, self.hang, self.stops = fail, hang, 0

    async def stop(self) -> None:
        self.stops += 1
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise self.fail


class Closable:
    def __init__(self) -> None:
        self.closes = 0

    async def close(self) -> None:
        self.closes += 1


async def test_close_client_stops_a_client_closes_an_admin_and_never_raises() -> None:
    stoppable, closable, failing = Stoppable(), Closable(), Stoppable(RuntimeError("broken"))
    await close_client(stoppable)
    await close_client(closable)
    await close_client(failing)
    await close_client(object())
    assert (stoppable.stops, closable.closes, failing.stops) == (1, 1, 1)


async def test_close_client_gives_up_after_within_s() -> None:
    hanging = Stoppable(hang=True)
    await asyncio.wait_for(close_client(hanging, 0.01), timeout=30)
    assert hanging.stops == 1 and LEAVE_WITHIN_S == 5.0


# ------------------------------------------------------------------------------------ start_client


class Client:
    """A client whose `start` fails with the next of `failures` (shared by every client built)."""

    built: list[Client] = []

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.started, self.stopped = failures, False, 0
        Client.built.append(self)

    async def start(self) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.started = True

    async def stop(self) -> None:
        self.stopped += 1


@pytest.fixture
def diagnosed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    async def diagnose(bootstrap: str) -> KdcUnavailable | None:
        asked.append(bootstrap)
        return None

    monkeypatch.setattr(clients, "diagnose", diagnose)
    Client.built = []
    return asked


async def test_each_attempt_builds_a_fresh_client_and_closes_the_one_that_failed(
    diagnosed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    failures: list[BaseException] = [KafkaConnectionError("gone"), KafkaTimeoutError()]
    caplog.set_level(logging.WARNING, "turnledger.retry")
    client = await start_client(
        lambda: Client(failures), bootstrap=BOOTSTRAP, action="start x", backoff=QUICK
    )
    assert Client.built[-1] is client and client.started and len(Client.built) == 3
    assert [(c.started, c.stopped) for c in Client.built] == [(False, 1), (False, 1), (True, 0)]
    assert diagnosed == [BOOTSTRAP]  # the connection error only: a timeout is no refused login
    assert [r.getMessage().split(" (attempt")[0] for r in caplog.records] == [
        f"waiting for Kafka at {BOOTSTRAP} to start x"
    ] * 2
    assert "while trying to start x (KafkaConnectionError: gone)" in caplog.records[0].getMessage()


async def test_a_client_that_cannot_start_gives_up_as_the_backoff_says(diagnosed: list[str]) -> None:
    with pytest.raises(KafkaUnavailableError) as raised:
        await start_client(
            lambda: Client([KafkaConnectionError("gone")]), bootstrap=BOOTSTRAP, action="start x"
        )
    assert (raised.value.action, raised.value.bootstrap, len(Client.built), Client.built[0].stopped) == (
        "start x",
        BOOTSTRAP,
        1,
        1,
    )


async def test_a_kdc_that_did_not_answer_is_the_outage_s_cause(
    monkeypatch: pytest.MonkeyPatch, diagnosed: list[str]
) -> None:
    kdc_down = KdcUnavailable("no KDC of TURNLEDGER.TEST answered")

    async def diagnose(bootstrap: str) -> KdcUnavailable | None:
        return kdc_down

    monkeypatch.setattr(clients, "diagnose", diagnose)
    gone = KafkaConnectionError("gone")
    with pytest.raises(KafkaUnavailableError) as raised:
        await start_client(lambda: Client([gone]), bootstrap=BOOTSTRAP, action="start x")
    assert (raised.value.cause, raised.value.cause.__cause__) == (kdc_down, gone)  # type: ignore[union-attr]


async def test_a_start_that_is_no_outage_is_raised_after_closing_the_client(diagnosed: list[str]) -> None:
    refused = GroupAuthorizationFailedError()
    with pytest.raises(GroupAuthorizationFailedError):
        await start_client(lambda: Client([refused]), bootstrap=BOOTSTRAP, action="x", backoff=QUICK)
    assert (len(Client.built), Client.built[0].stopped, diagnosed) == (1, 1, [])


async def test_a_start_stopped_while_waiting_raises_stop_requested(diagnosed: list[str]) -> None:
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(StopRequested):
        await start_client(lambda: Client([]), bootstrap=BOOTSTRAP, action="x", backoff=QUICK, stop=stop)
    assert Client.built == []


# ------------------------------------------------------------------------------------ the admin


class Admin:
    """`AIOKafkaAdminClient`: `described` is what `describe_topics` answers."""

    made: list[Admin] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs, self.closed, self.asked = kwargs, 0, []  # type: ignore[var-annotated]
        Admin.made.append(self)

    async def start(self) -> None:
        pass

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.asked.append(topics)
        return Admin.answer(topics)

    @staticmethod
    def answer(topics: list[str]) -> list[dict[str, Any]]:
        return []

    async def close(self) -> None:
        self.closed += 1


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> type[Admin]:
    Admin.made = []
    monkeypatch.setattr(clients, "AIOKafkaAdminClient", Admin)
    return Admin


async def test_a_topic_s_partitions_are_those_described_without_error_sorted(
    admin: type[Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    def answer(topics: list[str]) -> list[dict[str, Any]]:
        return [
            {
                "topic": topics[0],
                "error_code": 0,
                "partitions": [{"partition": 2}, {"partition": 0}, {"partition": 1}],
            },
            {"topic": "other", "error_code": 3, "partitions": [{"partition": 9}]},
        ]

    monkeypatch.setattr(Admin, "answer", staticmethod(answer))
    assert await describe_partitions(BOOTSTRAP, "t.ingress") == [0, 1, 2]
    [made] = admin.made
    assert (made.kwargs, made.asked, made.closed) == (
        {"bootstrap_servers": BOOTSTRAP, **SECURITY},
        [["t.ingress"]],
        1,
    )


async def test_a_topic_that_does_not_exist_has_no_partitions(admin: type[Admin]) -> None:
    assert await describe_partitions(BOOTSTRAP, "missing") == [] and admin.made[0].closed == 1


async def test_a_describe_that_fails_closes_its_admin_and_is_retried_as_an_outage(
    admin: type[Admin], monkeypatch: pytest.MonkeyPatch
) -> None:
    failures: list[BaseException] = [KafkaTimeoutError()]

    def answer(topics: list[str]) -> list[dict[str, Any]]:
        if failures:
            raise failures.pop(0)
        return [{"topic": topics[0], "error_code": 0, "partitions": [{"partition": 0}]}]

    monkeypatch.setattr(Admin, "answer", staticmethod(answer))
    assert await describe_partitions(BOOTSTRAP, "t", backoff=QUICK) == [0]
    assert [a.closed for a in admin.made] == [1, 1]


async def test_a_describe_stopped_raises_stop_requested(admin: type[Admin]) -> None:
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(
        StopRequested, match=r"^stop requested before Kafka at k1:9092,k2:9092 to describe topic 't'$"
    ):
        await describe_partitions(BOOTSTRAP, "t", stop=stop)


# ------------------------------------------------------------------------------------ waiting for topics


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> RecordedAsyncio:
    recorded = record_asyncio(monkeypatch, clients)
    monkeypatch.setattr(retry.random, "uniform", lambda low, high: 0.0)  # no jitter: exact delays
    return recorded


class Topics:
    """`describe_partitions` over topics that come into existence one look after another: the n-th look
    (counted per `wait_for_topics` round) sees `exist[n]` (the last entry for ever after)."""

    def __init__(self, *exist: set[str]) -> None:
        self.exist, self.looks = list(exist), 0
        self.asked: list[tuple[str, str, Backoff, asyncio.Event | None]] = []

    async def __call__(
        self, bootstrap: str, topic: str, *, backoff: Backoff, stop: asyncio.Event | None = None
    ) -> list[int]:
        self.asked.append((bootstrap, topic, backoff, stop))
        return [0] if topic in self.exist[min(self.looks, len(self.exist) - 1)] else []


async def test_waiting_for_topics_logs_the_missing_ones_with_a_growing_delay_until_they_exist(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    topics = Topics(*[{"a"}] * 7, {"a", "b"})
    monkeypatch.setattr(clients, "describe_partitions", topics)

    async def sleep(seconds: float) -> None:
        sleeps.waits.append(("sleep", seconds))
        topics.looks += 1

    sleeps.sleep = sleep  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, "turnledger.kafka.clients")
    await wait_for_topics(BOOTSTRAP, ["a", "b"], backoff=QUICK)
    delays = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert sleeps.waits == [("sleep", d) for d in delays]
    assert topics.asked == [(BOOTSTRAP, t, QUICK, None) for _ in range(8) for t in ("a", "b")]
    hint = "create them with `turnledger process --create-topics N`"
    assert [r.getMessage() for r in caplog.records] == [
        f"waiting for topics ['b'] to be created on {BOOTSTRAP} ({hint}); next look in {d:.1f}s"
        for d in delays
    ]


async def test_topics_that_exist_are_not_waited_for(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio
) -> None:
    topics = Topics({"a", "b"})
    monkeypatch.setattr(clients, "describe_partitions", topics)
    stop = asyncio.Event()
    await wait_for_topics(BOOTSTRAP, ["a", "b"], backoff=QUICK, stop=stop, hint="h")
    assert (
        topics.asked == [(BOOTSTRAP, "a", QUICK, stop), (BOOTSTRAP, "b", QUICK, stop)] and sleeps.waits == []
    )


async def test_waiting_for_topics_waits_on_the_stop_event_and_ends_on_it(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(clients, "describe_partitions", Topics(set()))
    stop = asyncio.Event()
    stop.set()
    sleeps.stop_after = 2
    caplog.set_level(logging.WARNING, "turnledger.kafka.clients")
    with pytest.raises(StopRequested, match=r"^stop requested while waiting for topics$"):
        await wait_for_topics(BOOTSTRAP, ["a"], backoff=QUICK, stop=stop, hint="make it")
    assert sleeps.waits == [("wait", 0.5), ("wait", 1.0), ("wait", 2.0)]
    assert caplog.records[0].getMessage() == (
        f"waiting for topics ['a'] to be created on {BOOTSTRAP} (make it); next look in 0.5s"
    )


async def test_a_topic_reader_is_started_then_waits_for_its_topic_and_is_closed_if_that_fails(
    monkeypatch: pytest.MonkeyPatch, diagnosed: list[str]
) -> None:
    waited: list[tuple[str, list[str], str]] = []
    outcome: list[BaseException] = []

    async def wait(
        bootstrap: str, topics: list[str], *, backoff: Backoff, stop: asyncio.Event, hint: str
    ) -> None:
        waited.append((bootstrap, topics, hint))
        if outcome:
            raise outcome.pop(0)

    monkeypatch.setattr(clients, "wait_for_topics", wait)
    stop = asyncio.Event()
    reader = await start_topic_reader(
        lambda: Client([]), bootstrap=BOOTSTRAP, topic="t", backoff=QUICK, stop=stop
    )
    assert reader.started and reader.stopped == 0
    assert waited == [(BOOTSTRAP, ["t"], "the processor creates it")]
    outcome.append(StopRequested("stop"))
    with pytest.raises(StopRequested):
        await start_topic_reader(
            lambda: Client([]), bootstrap=BOOTSTRAP, topic="t", backoff=QUICK, stop=stop, hint="h"
        )
    assert Client.built[-1].stopped == 1 and waited[-1][2] == "h"


async def test_the_step_loop_runs_until_stopped_riding_out_outages(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    steps: list[int] = []

    async def step() -> None:
        steps.append(len(steps))
        if len(steps) == 2:
            raise KafkaConnectionError("gone")
        if len(steps) == 4:
            stop.set()

    caplog.set_level(logging.WARNING, "turnledger.retry")
    await asyncio.wait_for(
        step_until_stopped(step, bootstrap=BOOTSTRAP, topic="t", backoff=QUICK, stop=stop), 30
    )
    assert steps == [0, 1, 2, 3]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"waiting for Kafka at {BOOTSTRAP} to read 't' (attempt 1, ")
    assert "while trying to read 't' (KafkaConnectionError: gone)" in line


# ------------------------------------------------------------------------------------ what each call is given


class RideOuts:
    """`clients.ride_out` recording what it is asked to wait for, with which backoff and stop event, and
    what its classifier makes of a connection loss; it runs the attempt once."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Backoff, asyncio.Event | None, str]] = []

    async def __call__(
        self, attempt: Any, *, waiting_for: str, classify: Any, backoff: Backoff, stop: asyncio.Event | None
    ) -> Any:
        outage = classify(KafkaConnectionError("gone"))
        self.asked.append((waiting_for, backoff, stop, str(outage).split(". Start")[0]))
        return await attempt()


@pytest.fixture
def ride_outs(monkeypatch: pytest.MonkeyPatch) -> RideOuts:
    recorded = RideOuts()
    monkeypatch.setattr(clients, "ride_out", recorded)
    return recorded


def gone(action: str) -> str:
    return f"Kafka is not reachable at {BOOTSTRAP!r} while trying to {action} (KafkaConnectionError: gone)"


async def test_a_client_is_started_as_asked(ride_outs: RideOuts, diagnosed: list[str]) -> None:
    stop = asyncio.Event()
    await start_client(lambda: Client([]), bootstrap=BOOTSTRAP, action="start x", backoff=QUICK, stop=stop)
    await start_client(lambda: Client([]), bootstrap=BOOTSTRAP, action="start y")
    assert ride_outs.asked == [
        (f"Kafka at {BOOTSTRAP} to start x", QUICK, stop, gone("start x")),
        (f"Kafka at {BOOTSTRAP} to start y", retry.NO_WAIT, None, gone("start y")),
    ]


async def test_a_describe_starts_its_admin_at_once_and_rides_out_as_asked(
    ride_outs: RideOuts, admin: type[Admin]
) -> None:
    stop = asyncio.Event()
    await describe_partitions(BOOTSTRAP, "t", backoff=QUICK, stop=stop)
    await describe_partitions(BOOTSTRAP, "u")
    action = "describe topic 't'"
    assert ride_outs.asked == [
        (f"Kafka at {BOOTSTRAP} to {action}", QUICK, stop, gone(action)),
        (f"Kafka at {BOOTSTRAP} to {action}", retry.NO_WAIT, None, gone(action)),  # the admin's own start
        (f"Kafka at {BOOTSTRAP} to describe topic 'u'", retry.NO_WAIT, None, gone("describe topic 'u'")),
        (f"Kafka at {BOOTSTRAP} to describe topic 'u'", retry.NO_WAIT, None, gone("describe topic 'u'")),
    ]


async def test_a_topic_reader_starts_and_waits_with_its_backoff_and_stop(
    monkeypatch: pytest.MonkeyPatch, ride_outs: RideOuts, diagnosed: list[str]
) -> None:
    waited: list[tuple[Backoff, asyncio.Event]] = []

    async def wait(
        bootstrap: str, topics: list[str], *, backoff: Backoff, stop: asyncio.Event, hint: str
    ) -> None:
        waited.append((backoff, stop))

    monkeypatch.setattr(clients, "wait_for_topics", wait)
    stop = asyncio.Event()
    await start_topic_reader(lambda: Client([]), bootstrap=BOOTSTRAP, topic="t", backoff=QUICK, stop=stop)
    assert ride_outs.asked == [(f"Kafka at {BOOTSTRAP} to read 't'", QUICK, stop, gone("read 't'"))]
    assert waited == [(QUICK, stop)]


async def test_the_step_loop_rides_out_each_step_with_its_backoff_and_stop(ride_outs: RideOuts) -> None:
    stop = asyncio.Event()

    async def step() -> None:
        stop.set()

    await step_until_stopped(step, bootstrap=BOOTSTRAP, topic="t", backoff=QUICK, stop=stop)
    assert ride_outs.asked == [(f"Kafka at {BOOTSTRAP} to read 't'", QUICK, stop, gone("read 't'"))]


async def test_a_close_waits_as_long_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts: list[float | None] = []

    async def wait_for(waiting: Coroutine[Any, Any, Any], timeout: float | None) -> None:
        timeouts.append(timeout)
        await waiting

    monkeypatch.setattr(clients.asyncio, "wait_for", wait_for)
    await close_client(Stoppable(), 0.25)
    await close_client(Stoppable())
    assert timeouts == [0.25, None]


async def test_a_client_start_given_up_by_its_backoff_is_not_tried_again(diagnosed: list[str]) -> None:
    failures: list[BaseException] = [KafkaConnectionError("gone"), KafkaConnectionError("gone")]
    with pytest.raises(KafkaUnavailableError):
        await start_client(lambda: Client(failures), bootstrap=BOOTSTRAP, action="x")  # NO_WAIT
    assert len(Client.built) == 1
