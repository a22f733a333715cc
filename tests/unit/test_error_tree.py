"""Every exception class turnledger defines derives from the one root (the fake provider keeps its own)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

import turnledger
from turnledger import errors
from turnledger.errors import (
    KafkaAccessError,
    KafkaUnavailableError,
    MissingTopicError,
    RedisAccessError,
    RedisFailoverError,
    RedisUnavailableError,
    ServiceUnavailable,
    TokenRequiredError,
    TurnledgerError,
    redact_url,
)


def _independent(cls: type) -> bool:
    """The fake provider stands in for a third party and imports nothing of turnledger."""
    return ".fake_provider" in cls.__module__


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(turnledger.__path__, "turnledger."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_exception_class_has_the_one_root() -> None:
    classes = _exception_classes()
    strays = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, TurnledgerError) and not _independent(c)
    ]
    assert len(classes) > 40
    assert strays == []


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _docstring_tree() -> str:
    """The tree in `turnledger/errors.py`'s docstring, from its root to the blank line after it."""
    lines = (errors.__doc__ or "").splitlines()
    start = lines.index("    TurnledgerError")
    end = lines.index("", start)
    return "\n".join(line.removeprefix("    ") for line in lines[start:end])


def _documented_tree() -> str:
    """The tree in docs/architecture.md's "The error tree" section, its code block."""
    section = ARCHITECTURE.read_text().split("## The error tree", 1)[1]
    return section.split("```\n", 2)[1].removesuffix("\n")


def test_the_architecture_doc_shows_the_tree_of_errors_py() -> None:
    assert _documented_tree() == _docstring_tree()


def test_the_tree_names_every_redis_error() -> None:
    """The outages' kinds (a failover, sentinels that name no primary) and the refusals'."""
    named = set(re.findall(r"\b[A-Z]\w+", _docstring_tree()))
    redis_errors = {c.__name__ for c in _exception_classes() if c.__name__.startswith("Redis")}
    assert {"RedisFailoverError", "RedisSentinelUnavailableError", "RedisSentinelAccessError"} <= redis_errors
    assert redis_errors - named == set()


def test_one_kafka_and_one_redis_unreachable_error_both_retriable() -> None:
    """And a failover, a Redis outage of its own (it answers, but takes no writes), and sentinels that
    name no primary."""
    unreachable = [c for c in _exception_classes() if issubclass(c, ServiceUnavailable)]
    assert sorted(c.__name__ for c in unreachable) == [
        "KafkaUnavailableError",
        "RedisFailoverError",
        "RedisSentinelUnavailableError",
        "RedisUnavailableError",
        "ServiceUnavailable",
    ]
    assert all(e.retriable for e in unreachable)
    assert not TurnledgerError.retriable


def test_messages_say_what_was_tried_and_how_to_fix_it() -> None:
    kafka = str(KafkaUnavailableError("127.0.0.1:1", OSError("refused"), action="read 'x'"))
    assert "127.0.0.1:1" in kafka and "read 'x'" in kafka and "OSError: refused" in kafka
    assert "turnledger dev up" in kafka and "KAFKA_BOOTSTRAP_SERVERS" in kafka
    redis = str(RedisUnavailableError("redis://127.0.0.1:1/0"))
    assert "redis://127.0.0.1:1/0" in redis and "REDIS_URL" in redis


@pytest.mark.parametrize(
    ("cause", "shown"),
    [
        (OSError("refused"), "(OSError: refused)"),
        (KafkaConnectionError("broker away"), "(KafkaConnectionError: broker away)"),  # its text has its name
        (TimeoutError(), "(TimeoutError)"),
        (KafkaTimeoutError(), "(KafkaTimeoutError)"),
        (ValueError("ValueErrors: a word that starts like the name"), "(ValueError: ValueErrors: a word"),
    ],
)
def test_a_cause_is_named_once_and_never_by_an_empty_text(cause: BaseException, shown: str) -> None:
    message = str(KafkaUnavailableError("k:9092", cause, action="read"))
    assert message.startswith(f"Kafka is not reachable at 'k:9092' while trying to read {shown}")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://gateway:s3cret-pw@10.0.0.5:6379/0", "redis://gateway:***@10.0.0.5:6379/0"),
        ("rediss://:s3cret-pw@cache.example.net:6380/1", "rediss://:***@cache.example.net:6380/1"),
        ("rediss://:p@ss@cache.example.net/1", "rediss://:***@cache.example.net/1"),  # an unescaped @
        (
            "redis://cache.example.net/0?password=s3cret-pw&db=2",
            "redis://cache.example.net/0?password=***&db=2",
        ),
        ("unix:///run/redis.sock?db=0&Password=s3cret-pw", "unix:///run/redis.sock?db=0&Password=***"),
        ("redis://gateway@cache.example.net/0", "redis://gateway@cache.example.net/0"),  # a user alone
        ("redis://cache.example.net/0?client_name=a@b", "redis://cache.example.net/0?client_name=a@b"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://u:s3cret:pw@h/0", "redis://u:***@h/0"),  # a password holding ':' is hidden whole
        ("redis://u:s3cret@h/0?next=redis://x", "redis://u:***@h/0?next=redis://x"),  # '://' in the query
        ("redis://h/0?note=a:b@c", "redis://h/0?note=a:b@c"),  # user-like text in the query, left alone
        ("redis://h/0?x=1?note=a:b@c", "redis://h/0?x=1?note=a:b@c"),
        ("redis://h/0?note=a:b@c?x=1", "redis://h/0?note=a:b@c?x=1"),
        ("redis://h/0#a:b@c", "redis://h/0#a:b@c"),  # ... in the fragment
        ("redis://h/0#x#a:b@c#d", "redis://h/0#x#a:b@c#d"),
        ("host:6379", "host:6379"),  # no scheme: nothing to find
    ],
)
def test_a_redis_password_is_never_in_the_message(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    error = RedisUnavailableError(url, OSError("refused"))
    assert error.url == shown and repr(shown) in str(error)
    assert "s3cret" not in str(error) and "p@ss" not in str(error)


def test_each_outage_message_says_what_was_tried_and_how_to_fix_it_whole() -> None:
    fix = (
        "Start the local stack with `turnledger dev up` and export KAFKA_BOOTSTRAP_SERVERS, or set "
        "KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) to a reachable broker list host:port[,host:port]."
    )
    assert str(KafkaUnavailableError("k:1")) == f"Kafka is not reachable at 'k:1'. {fix}"
    assert str(KafkaUnavailableError("k:1", action="read 't'")) == (
        f"Kafka is not reachable at 'k:1' while trying to read 't'. {fix}"
    )
    assert (
        str(KafkaUnavailableError("k:1", OSError("refused")))
        == f"Kafka is not reachable at 'k:1' (OSError: refused). {fix}"
    )
    answered = KafkaUnavailableError(
        "k:1", OSError("x"), action="commit", reachable_but="the coordinator is loading"
    )
    assert (
        str(answered)
        == "Kafka at 'k:1' answered while trying to commit (OSError: x), but the coordinator is loading."
    )
    assert (
        str(KafkaUnavailableError("k:1", reachable_but="it said wait"))
        == "Kafka at 'k:1' answered, but it said wait."
    )

    class KdcDown(Exception):
        outage_fix = "Start the KDC."

    error = KafkaUnavailableError("k:1", KdcDown("no KDC"), action="log in")
    assert (
        str(error)
        == "Kafka is not reachable at 'k:1' while trying to log in (KdcDown: no KDC). Start the KDC."
    )
    assert (error.bootstrap, error.action, str(error.cause)) == ("k:1", "log in", "no KDC")


def test_the_redis_messages_whole() -> None:
    fix = (
        "Start the local stack with `turnledger dev up`, or set REDIS_URL (or --redis-url) to a reachable "
        "Redis, e.g. redis://127.0.0.1:6379/0."
    )
    assert str(RedisUnavailableError("redis://r:1/0")) == f"Redis is not reachable at 'redis://r:1/0'. {fix}"
    refused = ConnectionRefusedError("refused")
    down = RedisUnavailableError("redis://u:pw@r:1/0", refused)
    assert (
        str(down)
        == f"Redis is not reachable at 'redis://u:***@r:1/0' (ConnectionRefusedError: refused). {fix}"
    )
    assert (down.url, down.cause) == ("redis://u:***@r:1/0", refused)
    failover = RedisFailoverError(
        "redis://u:pw@r:1/0", OSError("READONLY You can't write against a replica.")
    )
    assert str(failover) == (
        "Redis at 'redis://u:***@r:1/0' takes no writes "
        "(OSError: READONLY You can't write against a replica): "
        "a failover is under way; waiting for the primary. REDIS_URL must name the primary wherever it moves "
        "(a managed primary endpoint, a proxy, or its sentinels: redis+sentinel://), not one node."
    )
    boxed = RedisFailoverError("redis://r:1/0", OSError("READONLY in BOX."))
    assert str(boxed).startswith("Redis at 'redis://r:1/0' takes no writes (OSError: READONLY in BOX): ")
    assert str(RedisFailoverError("redis://r:1/0")).startswith(
        "Redis at 'redis://r:1/0' takes no writes: a failover"
    )
    access = RedisAccessError(
        "redis://u:pw@r:1/0", "as user u", PermissionError("WRONGPASS invalid."), "Check it."
    )
    assert str(access) == (
        "Redis at 'redis://u:***@r:1/0' refused the connection (as user u): "
        "PermissionError: WRONGPASS invalid. Check it."
    )
    assert access.url == "redis://u:***@r:1/0"
    tax = RedisAccessError("redis://r:1/0", "as user u", PermissionError("NOPERM for user X."), "Check it.")
    assert str(tax) == (
        "Redis at 'redis://r:1/0' refused the connection (as user u): PermissionError: NOPERM for user X. "
        "Check it."
    )


def test_the_other_messages_whole() -> None:
    missing = MissingTopicError("t.x", "k:1")
    assert (missing.topic, missing.bootstrap, str(missing)) == (
        "t.x",
        "k:1",
        "topic 't.x' does not exist on 'k:1'. Check --topic-prefix, or start the processor (it creates the "
        "topics) before projecting or replaying.",
    )
    assert TokenRequiredError("0.0.0.0").host == "0.0.0.0"
    assert str(TokenRequiredError("0.0.0.0")) == (
        "binding '0.0.0.0' (not a loopback address) requires a bearer token: pass --token or set "
        "TURNLEDGER_SERVE_TOKEN"
    )
    refused = KafkaAccessError("k:1", "SASL_SSL", PermissionError("bad password"), "Check the password.")
    assert str(refused) == (
        "Kafka at 'k:1' refused the connection (SASL_SSL): PermissionError: bad password. Check the password."
    )
    assert (refused.bootstrap, str(refused.cause)) == ("k:1", "bad password")
