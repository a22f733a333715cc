"""Typed failures of the projector and replay tools; each message says what was tried and how to fix it."""

from __future__ import annotations


class ProjectionError(RuntimeError):
    """Base class."""


class RedisUnavailableError(ProjectionError):
    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        self.url = url
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        super().__init__(
            f"Redis is not reachable at {url!r}{detail}. Start the local stack with `turnledger dev up`, "
            "or set REDIS_URL (or --redis-url) to a reachable Redis, e.g. redis://127.0.0.1:6379/0."
        )


class KafkaUnreachableError(ProjectionError):
    def __init__(self, bootstrap: str, cause: BaseException | None = None) -> None:
        self.bootstrap = bootstrap
        detail = f" ({type(cause).__name__}: {cause})" if cause else ""
        super().__init__(
            f"Kafka is not reachable at {bootstrap!r}{detail}. Start the local stack with "
            "`turnledger dev up`, or set KAFKA_BOOTSTRAP_SERVERS (or --bootstrap) to a reachable broker "
            "list host:port[,host:port]."
        )


class MissingTopicError(ProjectionError):
    def __init__(self, topic: str, bootstrap: str) -> None:
        self.topic = topic
        super().__init__(
            f"topic {topic!r} does not exist on {bootstrap!r}. Check --topic-prefix, or start the processor "
            "(it creates the topics) before projecting or replaying."
        )


class AmbiguousOperationError(ProjectionError):
    def __init__(self, operation_id: str, conversations: list[str]) -> None:
        self.operation_id = operation_id
        self.conversations = conversations
        super().__init__(
            f"operation id {operation_id!r} exists in {len(conversations)} conversations "
            f"({', '.join(repr(c) for c in conversations)}); operation ids are unique per conversation "
            "only. Name the conversation (--conversation)."
        )
