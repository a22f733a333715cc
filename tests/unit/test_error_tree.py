"""Every exception class turnledger defines derives from the one root (the fake provider keeps its own)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

import turnledger
from turnledger.errors import (
    KafkaUnavailableError,
    RedisFailoverError,
    RedisUnavailableError,
    ServiceUnavailable,
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


def test_one_kafka_and_one_redis_unreachable_error_both_retriable() -> None:
    """And a failover, a Redis outage of its own (it answers, but takes no writes)."""
    unreachable = [c for c in _exception_classes() if issubclass(c, ServiceUnavailable)]
    assert sorted(c.__name__ for c in unreachable) == [
        "KafkaUnavailableError",
        "RedisFailoverError",
        "RedisUnavailableError",
        "ServiceUnavailable",
    ]
    assert all(e.retriable for e in (KafkaUnavailableError, RedisUnavailableError, RedisFailoverError))
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
    ],
)
def test_a_redis_password_is_never_in_the_message(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    error = RedisUnavailableError(url, OSError("refused"))
    assert error.url == shown and repr(shown) in str(error)
    assert "s3cret" not in str(error) and "p@ss" not in str(error)
