"""The root of every exception turnledger raises on purpose, and the infrastructure errors all layers share.

Every typed failure derives from `TurnledgerError`, so a caller that wants "anything
of ours" catches one class. Bad *input* is not an exception at all in the folds: it
becomes a rejection record with a `ReasonCode`. Exceptions are for callers.

    TurnledgerError
    ├── ServiceUnavailable                   retriable: the service may come back
    │   ├── KafkaUnavailableError            every layer: Kafka unreachable / not acknowledging
    │   └── RedisUnavailableError            projections, serve: Redis unreachable
    │       ├── RedisFailoverError           Redis takes no writes: a replica now, or without its primary
    │       └── RedisSentinelUnavailableError  no sentinel named a primary for the service
    ├── KafkaAccessError                     Kafka answered but refused our credentials or TLS
    ├── TokenRefused, TokenUnavailable (kafka/oauth) an OAUTHBEARER token's issuer refused us / is down;
    │                                        also aiokafka's AuthenticationFailedError / KafkaConnectionError
    ├── KafkaSettingsError                   the KAFKA_* security variables do not make one setting;
    │                                        SessionTimeoutRefusedError (kafka/group_member): a broker
    │                                        refused a consumer group's --session-timeout-ms
    ├── RedisAccessError                     Redis answered but refused our login, or TLS failed
    │   └── RedisSentinelAccessError         a sentinel refused us or is none, or none monitors the service
    ├── RedisSettingsError                   REDIS_URL and the REDIS_* variables do not make one setting
    ├── MissingTopicError                    a topic the command needs does not exist
    ├── CanonicalJsonError        (model)    a value that has no canonical JSON
    ├── CodecError                (codec)    NotSingleObjectEncoded, UnknownFingerprint, CorruptRecord,
    │                                        UnencodableRecord; compiled.Unsupported / Miss stay inside codec
    ├── AdapterError              (adapters) UnknownAdapterError, MalformedSequenceError,
    │                                        InvalidModelRevisionError, EncodingUnavailableError,
    │                                        ModelRegistryError
    ├── StreamFormatError         (streaming) EventStreamError, ArgumentError
    ├── StateFormatError          (dispatch) StateDecodeError, UnreadableStateFormat
    ├── BatchClosedError          (dispatch) a batch folded or closed after its close (engine.py)
    ├── InputFileError            (CLI files) LegacyExchangeError, LegacyFormatError, ProviderConfigError
    ├── ProcessorError            (processors) TopicMismatchError, ProducerFencedError, PoisonHookError,
    │                                        TooManyAbortsError, ProcessesFailedError, LimitsConfigError,
    │                                        StateStoreError (the --state-dir, here);
    │                                        BatchAborted, ProducerBroken stay inside (transaction.py)
    ├── ChildRefusedError         (processors) every failed child of `process --processes N` met a
    │                                        refusal (`cli_refusals`): said as one process says it
    ├── ProjectionError           (projections) AmbiguousOperationError, EpochChangedError
    ├── StopRequested             (retry)    asked to stop while waiting out an outage
    ├── StoppedAtOnce             (shutdown) a second signal cancelled a long-running command
    ├── GatewayError              (gateway)  UnknownEndpointError, ToolError, CredentialError,
    │                                        ProviderConfigError (also an InputFileError),
    │                                        RefusedEventError (what the ledger would refuse, not sent),
    │                                        EventArgumentError (an argument a client builder cannot
    │                                        make a valid event of, named; nothing sent)
    ├── ServeError                (serve)    TokenRequiredError, DispatchDefaultError (a --adapter,
    │                                        --provider or --model-revision the processor would reject),
    │                                        DispatchRequestError (a dispatch body naming one: 422),
    │                                        RequestBodyError (a POST body the API does not take: 400),
    │                                        QueryParameterError (a query parameter it does not take: 400)
    └── DevstackError             (devstack) JavaMissing, JavaTooOld, KeytoolMissing, MavenMissing,
                                             MavenDownloadFailed, RedisServerMissing, PrometheusMissing,
                                             PortInUse, ServiceNotReady, DockerUnavailable

The fake provider (`turnledger.fake_provider`) imports nothing of turnledger on purpose
(it stands in for a third party), so its errors have their own root, `FakeProviderError`.

`retriable` says whether waiting and trying again can help; services that ride out
outages decide on it. Each message says what was tried and how to fix it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

_START_STACK = "Start the local stack with `turnledger dev up`"


class TurnledgerError(Exception):
    """Root of every turnledger exception."""

    retriable: ClassVar[bool] = False


class ServiceUnavailable(TurnledgerError):
    """A service turnledger depends on cannot be reached now."""

    retriable: ClassVar[bool] = True


class KafkaUnavailableError(ServiceUnavailable):
    """Kafka could not be reached, or did not acknowledge, while doing `action`. `reachable_but`:
    Kafka answered, and this says why the action must still be retried (then the message does not
    send the reader to check the broker list). A `cause` that knows what stood between us and the
    brokers says what to do instead, as its `outage_fix` (`kafka.kerberos.KdcUnavailable`: the KDC)."""

    def __init__(
        self,
        bootstrap: str,
        cause: BaseException | None = None,
        *,
        action: str | None = None,
        reachable_but: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.action = action
        self.cause = cause
        doing = f" while trying to {action}" if action else ""
        detail = f" ({described_cause(cause)})" if cause else ""
        if reachable_but is not None:
            super().__init__(f"Kafka at {bootstrap!r} answered{doing}{detail}, but {reachable_but}.")
            return
        fix = getattr(cause, "outage_fix", None) or (
            f"{_START_STACK} and export KAFKA_BOOTSTRAP_SERVERS, or set KAFKA_BOOTSTRAP_SERVERS (or "
            "--bootstrap) to a reachable broker list host:port[,host:port]."
        )
        super().__init__(f"Kafka is not reachable at {bootstrap!r}{doing}{detail}. {fix}")


def described_cause(cause: BaseException) -> str:
    """`Type: message`, once: aiokafka's errors already begin their text with their type's name, and
    a bare `TimeoutError()` has no text at all."""
    name, text = type(cause).__name__, str(cause)
    if not text or text == name:
        return name
    return text if text.startswith(f"{name}: ") else f"{name}: {text}"


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***` (`redis://user:***@host:6379/0`, `?password=***`, the
    form redis-py also reads): the form a URL takes in a message or a log line. The user part ends at
    the last `@` before the query, as the URL parsers that read it (redis-py's, through urllib) end
    it, so a password holding an unescaped `@` is hidden whole."""
    url = _QUERY_PASSWORD.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority = rest.split("?", 1)[0].split("#", 1)[0]
    at = authority.rfind("@")
    user, colon, _password = authority[: max(at, 0)].partition(":")
    if at < 0 or not colon:
        return url
    return f"{scheme}://{user}:***@{rest[at + 1 :]}"


class RedisUnavailableError(ServiceUnavailable):
    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        url = redact_url(url)
        self.url = url
        self.cause = cause
        detail = f" ({described_cause(cause)})" if cause else ""
        super().__init__(
            f"Redis is not reachable at {url!r}{detail}. {_START_STACK}, or set REDIS_URL "
            "(or --redis-url) to a reachable Redis, e.g. redis://127.0.0.1:6379/0."
        )


class RedisFailoverError(RedisUnavailableError):
    """Redis answered but takes no writes: it was demoted to a replica (`READONLY`) or is a replica
    that lost its primary (`MASTERDOWN`). A failover is under way; the primary comes back under the
    URL when the URL follows the primary (a managed primary endpoint, a proxy, Sentinel)."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        super().__init__(url, cause)
        detail = f" ({type(cause).__name__}: {str(cause).rstrip('.')})" if cause else ""
        self.args = (
            f"Redis at {self.url!r} takes no writes{detail}: a failover is under way; waiting for the "
            "primary. REDIS_URL must name the primary wherever it moves (a managed primary endpoint, a "
            "proxy, or its sentinels: redis+sentinel://), not one node.",
        )


class RedisSentinelUnavailableError(RedisUnavailableError):
    """No sentinel named a primary for `service`: the sentinels are down or out of reach, or see its
    primary down (a failover not done yet); or, where nobody asked them again (`redisconn.sentinel_probe`,
    which makes a `RedisSentinelAccessError` of it), refuse our login or do not monitor the service. `answers`
    is what they answered, without redis-py's repr of each sentinel's client (`redisconn.naming`),
    cut to `MAX_ANSWERS_CHARS`."""

    MAX_ANSWERS_CHARS: ClassVar[int] = 500

    def __init__(
        self, url: str, sentinels: Sequence[str], service: str, cause: BaseException, answers: str
    ) -> None:
        super().__init__(url, cause)
        self.sentinels = tuple(sentinels)
        self.service = service
        if len(answers) > self.MAX_ANSWERS_CHARS:
            answers = answers[: self.MAX_ANSWERS_CHARS - 1] + "…"
        self.args = (
            f"Redis is not reachable at {self.url!r}: no sentinel of {', '.join(self.sentinels)} named a "
            f"primary for {service!r} ({type(cause).__name__}: {answers.rstrip('.')}). Check that the "
            f"sentinels run and can be reached at those addresses, that they monitor {service!r} "
            f"(`sentinel monitor {service} HOST PORT QUORUM`) and see its primary up, and that "
            "REDIS_SENTINEL_PASSWORD_FILE holds their password if they require one; or set REDIS_URL "
            "(or --redis-url) to sentinels that can: redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB].",
        )


class KafkaAccessError(TurnledgerError):
    """Kafka was reached, but refused the connection for who we are (a SASL login refused, a mechanism
    it does not enable) or TLS failed (a certificate we cannot verify, a client certificate it refused):
    waiting does not help."""

    def __init__(self, bootstrap: str, security: str, cause: BaseException, fix: str) -> None:
        self.bootstrap = bootstrap
        self.cause = cause
        super().__init__(
            f"Kafka at {bootstrap!r} refused the connection ({security}): {type(cause).__name__}: "
            f"{cause}. {fix}"
        )


class MetricsServeError(TurnledgerError):
    """The metrics endpoint cannot listen where it was told (the port is taken, the host is not ours)."""


class KafkaSettingsError(TurnledgerError, ValueError):
    """The KAFKA_* security variables are incomplete or contradict each other, or a consumer group's
    timing cannot work (`kafka/group_timing.py`, `kafka/group_member.py`); names the variable or flag."""


class RedisAccessError(TurnledgerError):
    """Redis was reached, but refused who we are (a wrong user or password, a user without the
    permissions needed) or the connection's TLS cannot work (a certificate we cannot verify, TLS
    spoken to a plaintext port or the other way round): waiting does not help, unlike
    `RedisUnavailableError`. `tried` says how we connected, never with the password."""

    def __init__(self, url: str, tried: str, cause: BaseException, fix: str) -> None:
        url = redact_url(url)
        self.url = url
        self.cause = cause
        super().__init__(
            f"Redis at {url!r} refused the connection ({tried}): {type(cause).__name__}: "
            f"{str(cause).rstrip('.')}. {fix}"
        )


class RedisSentinelAccessError(RedisAccessError):
    """The sentinels answered, and waiting will not make them name a primary for `service`: one refused
    us (our login, SENTINEL to our user, our TLS, or the protocol we speak), or is a Redis and no
    sentinel, or none of them monitors it (`redisconn.sentinel_probe`). `answers` says what each sentinel
    said, by HOST:PORT; `cause` is the first refusal's error."""

    def __init__(
        self, url: str, service: str, answers: Sequence[str], cause: BaseException, fix: str
    ) -> None:
        super().__init__(url, "", cause, fix)
        self.service = service
        self.answers = tuple(answers)
        self.args = (
            f"Redis at {self.url!r}: no sentinel named a primary for {service!r}: {'; '.join(self.answers)}. "
            f"{fix}",
        )


class RedisSettingsError(TurnledgerError, ValueError):
    """REDIS_URL (or --redis-url) and the REDIS_* variables do not make one working setting; names
    the variable."""


class MissingTopicError(TurnledgerError):
    def __init__(self, topic: str, bootstrap: str) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        super().__init__(
            f"topic {topic!r} does not exist on {bootstrap!r}. Check --topic-prefix, or start the processor "
            "(it creates the topics) before projecting or replaying."
        )


class CanonicalJsonError(TurnledgerError, ValueError):
    """The value cannot be put in canonical JSON (non-string keys, unknown types; a NaN is written as
    null, see `model/canonical.py`)."""


class AdapterError(TurnledgerError):
    """An adapter, its model registry or its token encodings cannot do what was asked."""


class StreamFormatError(TurnledgerError, ValueError):
    """Provider stream bytes or tool-argument text that do not have the required form."""


class StateFormatError(TurnledgerError, ValueError):
    """A stored fold state that this release cannot read."""


class InputFileError(TurnledgerError, ValueError):
    """A file an operator handed to a command is not usable; names the line and what is wrong."""


class ProcessorError(TurnledgerError):
    """A failure of the Kafka partition-processor runtime."""


class StateStoreError(ProcessorError):
    """The local state store (`--state-dir`) cannot be opened: a disk or permission fault, never a
    Kafka outage, so a partition does not wait for it to pass."""


class ProjectionError(TurnledgerError):
    """A failure of the projections and the replay tools."""


class GatewayError(TurnledgerError):
    """A failure of the producing side: worker, endpoints, tool executor."""


class DevstackError(TurnledgerError):
    """Anything that prevents the local Kafka + Redis stack from coming up or going down."""


class DevstackSettingsError(DevstackError, ValueError):
    """A TURNLEDGER_* setting of the devstack that cannot work; names the variable."""


class ServeError(TurnledgerError):
    """A failure of `turnledger serve`, the client API and web page."""


class TokenRequiredError(ServeError, ValueError):
    """`turnledger serve` was asked to bind a non-loopback address without a bearer token."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"binding {host!r} (not a loopback address) requires a bearer token: pass --token or set "
            "TURNLEDGER_SERVE_TOKEN"
        )
        self.host = host


class DispatchDefaultError(ServeError, ValueError):
    """A `turnledger serve --adapter/--provider/--model-revision` the processor would reject every
    dispatch of the page for; names the option and the values it knows."""

    def __init__(self, option: str, value: str, why: str) -> None:
        super().__init__(f"{option} {value!r}: {why}")
        self.option = option


class DispatchRequestError(ServeError, ValueError):
    """A POST `…/dispatch` of the `turnledger serve` API whose adapter, provider or model revision the
    processor would reject (`serve/dispatch_defaults.py`); names the body's field and the values it
    knows. Answered 422, nothing sent."""

    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"{field} {value!r}: {why}")
        self.field = field


class RequestBodyError(ServeError, ValueError):
    """A POST body of the `turnledger serve` API that is not what its endpoint takes (`serve/bodies.py`);
    names each field refused and what it must be, in one line. Answered 400."""


class QueryParameterError(ServeError, ValueError):
    """A query parameter of the `turnledger serve` API out of what its endpoint takes (`serve/bodies.py`);
    names the parameter and what it must be. Answered 400."""
