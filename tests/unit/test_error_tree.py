"""Every exception class turnledger defines derives from the one root (the fake provider keeps its own)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import turnledger
from turnledger.errors import (
    KafkaUnavailableError,
    RedisUnavailableError,
    ServiceUnavailable,
    TurnledgerError,
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
    unreachable = [c for c in _exception_classes() if issubclass(c, ServiceUnavailable)]
    assert sorted(c.__name__ for c in unreachable) == [
        "KafkaUnavailableError",
        "RedisUnavailableError",
        "ServiceUnavailable",
    ]
    assert KafkaUnavailableError.retriable and RedisUnavailableError.retriable
    assert not TurnledgerError.retriable


def test_messages_say_what_was_tried_and_how_to_fix_it() -> None:
    kafka = str(KafkaUnavailableError("127.0.0.1:1", OSError("refused"), action="read 'x'"))
    assert "127.0.0.1:1" in kafka and "read 'x'" in kafka and "OSError: refused" in kafka
    assert "turnledger dev up" in kafka and "KAFKA_BOOTSTRAP_SERVERS" in kafka
    redis = str(RedisUnavailableError("redis://127.0.0.1:1/0"))
    assert "redis://127.0.0.1:1/0" in redis and "REDIS_URL" in redis
