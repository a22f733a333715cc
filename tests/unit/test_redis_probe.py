"""What `redisconn.probe` and `redisconn.client` make of a Redis port, without a Redis: loopback servers
in the test stand for one. A plaintext server that answers `+PONG` or `-NOAUTH`, one that resets every
connection, a TLS server (the test-only certificate of tests/fixtures/client_tls/, nothing verified by the
probes), and a TLS server that requires a client certificate and sends the alert OpenSSL sends when it has
none (`TLSV13_ALERT_CERTIFICATE_REQUIRED`) or one of a CA it does not know (`TLSV1_ALERT_UNKNOWN_CA`).

On a real redis-server: tests/integration/test_redis_tls.py and test_redis_client_certificate.py.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError

from tests.unit.tls_servers import (
    CERT,
    HOST,
    KEY,
    TLS,
    FakeTlsPort,
    Handler,
    closed_port,
    resetting,
    server_context,
    serving,
)
from turnledger.errors import RedisAccessError, RedisUnavailableError
from turnledger.redisconn import probe
from turnledger.redisconn.client import classified, connect, diagnose, explain, redis_client
from turnledger.redisconn.probe import certificate_refusal, other_protocol
from turnledger.redisconn.refusals import (
    CHECK_CLIENT_CERTIFICATE,
    CHECK_LOGIN,
    CHECK_NO_CLIENT_CERTIFICATE,
    CHECK_PERMISSIONS,
    CHECK_PLAINTEXT_PORT,
    CHECK_TLS_PORT,
)

GUARD_S = 2.0
"""No call here may take longer: a mutant that waits for ever fails at once instead of hanging."""

T = TypeVar("T")


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """No REDIS_* setting of the machine's; the probes' waits short (nothing here needs more)."""
    for name in (
        "REDIS_SSL_CA_FILE",
        "REDIS_SSL_CERT_FILE",
        "REDIS_SSL_KEY_FILE",
        "REDIS_PASSWORD_FILE",
        "REDIS_SENTINEL_PASSWORD_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(probe, "PROBE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(probe, "ALERT_WAIT_S", 0.2)


@dataclass
class FakeRedis:
    """A plaintext Redis that gives `reply` to PING (`+PONG`, or `-NOAUTH ...` for every command when it
    wants a login), RESP3 to HELLO 3 and `+OK` to anything else, in RESP or inline, and closes on bytes
    that are no command (a TLS ClientHello). `heard` is every command, as sent."""

    reply: bytes
    login_first: bool = False
    heard: list[bytes] = field(default_factory=list)

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while command := await self._command(reader):
                self.heard.append(command)
                ping = command in (b"PING\r\n", b"*1\r\n$4\r\nPING\r\n")
                hello = command.startswith(b"*2\r\n$5\r\nHELLO\r\n")
                answer = b"%1\r\n$5\r\nproto\r\n:3\r\n" if hello else b"+OK\r\n"
                writer.write(self.reply if ping or self.login_first else answer)
                await writer.drain()
        finally:
            writer.close()

    @staticmethod
    async def _command(reader: asyncio.StreamReader) -> bytes:
        line = await reader.readline()
        if not line.endswith(b"\r\n") or not 0x20 <= line[0] < 0x7F:
            return b""
        if not line.startswith(b"*"):
            return line
        whole = line
        for _ in range(int(line[1:])):
            size = await reader.readline()
            whole += size + await reader.readexactly(int(size[1:]) + 2)
        return whole


def tls_client(port: int, *, certificate: bool = False) -> aioredis.Redis:
    """A `rediss://` client that does not verify the server (the fixtures' certificate is a client's)."""
    extra = {"ssl_certfile": CERT, "ssl_keyfile": KEY} if certificate else {}
    return aioredis.from_url(f"rediss://{HOST}:{port}/0?ssl_cert_reqs=none", **extra)


async def guarded(call: Awaitable[T]) -> T:
    async with asyncio.timeout(GUARD_S):
        return await call


# --- probe.other_protocol ---------------------------------------------------------------------------


@pytest.mark.parametrize("reply", [b"+PONG\r\n", b"-NOAUTH Authentication required.\r\n"])
async def test_a_tls_client_failing_at_a_redis_that_answers_a_plaintext_ping_has_the_plaintext_port(
    reply: bytes,
) -> None:
    """A PING answered `+` or `-` is Redis speaking plaintext; the probe sends exactly one inline PING."""
    redis = FakeRedis(reply)
    async with serving(redis) as port:
        assert await guarded(other_protocol(HOST, port, tls=True)) == CHECK_PLAINTEXT_PORT
    assert redis.heard == [b"PING\r\n"]


async def test_a_reply_that_is_not_redis_s_is_no_plaintext_port() -> None:
    """Only a simple string or an error reply is Redis's: an HTTP server's answer is not."""
    async with serving(FakeRedis(b"HTTP/1.1 400 Bad Request\r\n\r\n")) as port:
        assert await guarded(other_protocol(HOST, port, tls=True)) is None


@pytest.mark.parametrize("handler", [resetting, FakeTlsPort(server_context())], ids=["reset", "tls"])
async def test_a_tls_client_failing_at_a_port_that_does_not_answer_a_plaintext_ping_has_an_outage(
    handler: Handler,
) -> None:
    """A reset, or a TLS server taking the PING for a broken handshake, is no plaintext Redis: None."""
    async with serving(handler) as port:
        assert await guarded(other_protocol(HOST, port, tls=True)) is None


async def test_a_port_that_accepts_and_never_answers_is_an_outage_after_the_probe_s_timeout() -> None:
    """The probe waits `PROBE_TIMEOUT_S` for a reply, not for ever."""
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()
        writer.close()

    async with serving(silent) as port:
        assert await guarded(other_protocol(HOST, port, tls=True)) is None
        assert await guarded(other_protocol(HOST, port, tls=False)) is None
    assert accepted.is_set()


@pytest.mark.parametrize("reset_after_handshake", [False, True], ids=["closed", "reset"])
async def test_a_plaintext_client_failing_at_a_tls_port_has_the_tls_port(reset_after_handshake: bool) -> None:
    """A completed handshake (the server's certificate not verified) says the port speaks TLS, however
    the server ends the connection after it."""
    async with serving(FakeTlsPort(server_context(), reset_after_handshake)) as port:
        assert await guarded(other_protocol(HOST, port, tls=False)) == CHECK_TLS_PORT


@pytest.mark.parametrize("handler", [resetting, FakeRedis(b"+PONG\r\n")], ids=["reset", "plaintext"])
async def test_a_plaintext_client_failing_at_a_port_without_tls_has_an_outage(handler: Handler) -> None:
    """A reset, or a plaintext Redis (a ClientHello is no command), completes no handshake: None."""
    async with serving(handler) as port:
        assert await guarded(other_protocol(HOST, port, tls=False)) is None


@pytest.mark.parametrize("tls", [True, False])
async def test_a_port_nothing_listens_on_is_an_outage(tls: bool) -> None:
    """A refused connection answers in neither protocol."""
    assert await guarded(other_protocol(HOST, await closed_port(), tls=tls)) is None


# --- probe.certificate_refusal ----------------------------------------------------------------------


async def test_a_redis_that_wants_a_client_certificate_and_got_none_sends_certificate_required() -> None:
    """The alert a reset lost is read on a connection that writes nothing."""
    server = FakeTlsPort(server_context(trusted=str(TLS / "ca.pem"), require=True))
    async with serving(server) as port:
        alert = await guarded(certificate_refusal(tls_client(port), HOST, port))
    assert isinstance(alert, ssl.SSLError)
    assert alert.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert server.failures == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"]


async def test_a_redis_that_does_not_know_the_client_certificate_s_ca_sends_unknown_ca() -> None:
    """The probe presents the client's own certificate (its TLS settings, not a context of its own)."""
    server = FakeTlsPort(server_context(require=True))
    async with serving(server) as port:
        alert = await guarded(certificate_refusal(tls_client(port, certificate=True), HOST, port))
    assert isinstance(alert, ssl.SSLError)
    assert alert.reason == "TLSV1_ALERT_UNKNOWN_CA"
    assert server.failures == ["CERTIFICATE_VERIFY_FAILED"]


async def test_a_redis_that_takes_the_client_certificate_sends_no_alert() -> None:
    """A handshake followed by silence for `ALERT_WAIT_S`: None, and the probe closes its connection."""
    server = FakeTlsPort(server_context(trusted=str(TLS / "ca.pem"), require=True))
    async with serving(server) as port:
        assert await guarded(certificate_refusal(tls_client(port, certificate=True), HOST, port)) is None
    assert server.failures == []


async def test_a_server_that_speaks_and_closes_sends_no_alert() -> None:
    """Bytes after the handshake are read (one), and are no alert: None."""

    async def talking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = server_context().wrap_bio(incoming, outgoing, server_side=True)
        while data := await reader.read(65536):
            incoming.write(data)
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                writer.write(outgoing.read())
                continue
            tls.write(b"+hello\r\n")
            writer.write(outgoing.read())
            break
        await writer.drain()
        writer.close()

    async with serving(talking) as port:
        assert await guarded(certificate_refusal(tls_client(port), HOST, port)) is None


@pytest.mark.parametrize(
    "handler",
    [resetting, FakeRedis(b"+PONG\r\n"), FakeTlsPort(server_context())],
    ids=["reset", "plain", "tls"],
)
async def test_no_certificate_alert_from_a_port_that_sends_none(handler: Handler) -> None:
    """A reset, a plaintext port (its close is an EOF in the handshake, no alert), a TLS server that asks
    for no client certificate: None."""
    async with serving(handler) as port:
        assert await guarded(certificate_refusal(tls_client(port), HOST, port)) is None


async def test_a_port_that_never_completes_the_handshake_sends_no_alert_after_the_probe_s_timeout() -> None:
    """A server that accepts and says nothing holds the probe's handshake `PROBE_TIMEOUT_S`, not for
    ever: None."""
    accepted = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()
        writer.close()

    async with serving(silent) as port:
        assert await guarded(certificate_refusal(tls_client(port), HOST, port)) is None
    assert accepted.is_set()


async def test_a_plaintext_client_is_not_probed_for_a_certificate_alert() -> None:
    """Only a TLS client has a certificate to refuse: a plaintext client's probe connects nowhere."""
    redis = FakeRedis(b"+PONG\r\n")
    async with serving(redis) as port:
        client = aioredis.from_url(f"redis://{HOST}:{port}/0")
        assert await guarded(certificate_refusal(client, HOST, port)) is None
    assert redis.heard == []


# --- client.connect, diagnose, explain, classified --------------------------------------------------


def refused(url: str, tried: str, cause: BaseException, fix: str) -> str:
    """`RedisAccessError`'s words, spelled out here so that each part is pinned."""
    said = f"{type(cause).__name__}: {str(cause).rstrip('.')}"
    return f"Redis at {url!r} refused the connection ({tried}): {said}. {fix}"


async def test_connect_returns_the_client_once_its_ping_was_answered() -> None:
    """The client is this process's (`redis_client`: the connect timeout); its PING was sent and
    answered."""
    redis = FakeRedis(b"+PONG\r\n")
    async with serving(redis) as port:
        client = await guarded(connect(f"redis://{HOST}:{port}/0"))
        try:
            assert client.connection_pool.connection_kwargs["socket_connect_timeout"] == 5.0
            assert redis.heard[-1] == b"*1\r\n$4\r\nPING\r\n"
        finally:
            await client.aclose()


async def test_connect_to_a_redis_that_wants_a_login_is_a_login_refusal() -> None:
    """`-NOAUTH` is a refusal in one line, the user and password to check, raised from redis-py's error."""
    async with serving(FakeRedis(b"-NOAUTH Authentication required.\r\n", login_first=True)) as port:
        url = f"redis://{HOST}:{port}/0"
        with pytest.raises(RedisAccessError) as caught:
            await guarded(connect(url))
    cause = caught.value.cause
    assert str(caught.value) == refused(url, "plaintext, no login", cause, CHECK_LOGIN)
    assert caught.value.__cause__ is cause


async def test_connect_with_tls_to_a_plaintext_port_says_so() -> None:
    """The plaintext server closes on the ClientHello (an outage from inside redis-py); the probe's PING finds
    Redis speaking plaintext."""
    async with serving(FakeRedis(b"+PONG\r\n")) as port:
        url = f"rediss://{HOST}:{port}/0"
        with pytest.raises(RedisAccessError) as caught:
            await guarded(connect(url))
    cause = caught.value.cause
    assert isinstance(cause, RedisConnectionError)
    assert str(caught.value) == refused(url, "TLS, the system's CAs, no login", cause, CHECK_PLAINTEXT_PORT)
    assert caught.value.__cause__ is cause


async def test_connect_in_plaintext_to_a_tls_port_says_so() -> None:
    """The TLS server closes on RESP bytes; the probe's handshake finds the port speaking TLS."""
    async with serving(FakeTlsPort(server_context())) as port:
        url = f"redis://{HOST}:{port}/0"
        with pytest.raises(RedisAccessError) as caught:
            await guarded(connect(url))
    cause = caught.value.cause
    assert isinstance(cause, RedisConnectionError)
    assert str(caught.value) == refused(url, "plaintext, no login", cause, CHECK_TLS_PORT)


@pytest.mark.parametrize(
    ("trusted", "certificate", "reason", "fix"),
    [
        (str(TLS / "ca.pem"), False, "TLSV13_ALERT_CERTIFICATE_REQUIRED", CHECK_NO_CLIENT_CERTIFICATE),
        (None, True, "TLSV1_ALERT_UNKNOWN_CA", CHECK_CLIENT_CERTIFICATE),
    ],
)
async def test_connect_to_a_redis_that_refuses_the_client_certificate_says_which_to_check(
    monkeypatch: pytest.MonkeyPatch, trusted: str | None, certificate: bool, reason: str, fix: str
) -> None:
    """Whether redis-py read the alert or lost it to a reset, the refusal is the alert's."""
    if certificate:
        monkeypatch.setenv("REDIS_SSL_CERT_FILE", CERT)
        monkeypatch.setenv("REDIS_SSL_KEY_FILE", KEY)
    async with serving(FakeTlsPort(server_context(trusted=trusted, require=True))) as port:
        url = f"rediss://{HOST}:{port}/0?ssl_cert_reqs=none"
        with pytest.raises(RedisAccessError) as caught:
            await guarded(connect(url))
    cause = caught.value.cause
    assert isinstance(cause, ssl.SSLError) and cause.reason == reason
    tried = "TLS, certificate not verified" + (f", client certificate {CERT}" if certificate else "")
    assert str(caught.value) == refused(f"rediss://{HOST}:{port}/0", f"{tried}, no login", cause, fix)


async def test_connect_raises_an_error_that_is_no_connection_s_failure_as_it_is() -> None:
    """A PING refused with a plain `-ERR` is not ours to judge (`classify` None): raised unchanged."""
    async with serving(FakeRedis(b"-ERR unknown command 'PING'\r\n")) as port:
        with pytest.raises(ResponseError) as caught:
            await guarded(connect(f"redis://{HOST}:{port}/0"))
    assert str(caught.value) == "unknown command 'PING'"


async def test_connect_to_a_port_nothing_listens_on_is_an_outage() -> None:
    """Neither protocol answers: the outage redis-py raised, named by the client's URL, raised from it."""
    url = f"redis://{HOST}:{await closed_port()}/0"
    with pytest.raises(RedisUnavailableError) as caught:
        await guarded(connect(url))
    assert isinstance(caught.value.cause, RedisConnectionError)
    assert caught.value.url == url
    assert caught.value.__cause__ is caught.value.cause


async def test_diagnose_raises_a_refusal_and_returns_the_outage_or_none_on_an_answer() -> None:
    """A service that waits out outages is told only of refusals; the outage it goes on to wait out is
    given back (its sentinels, of a Sentinel URL, asked already)."""
    async with serving(FakeRedis(b"-NOAUTH Authentication required.\r\n", login_first=True)) as port:
        with pytest.raises(RedisAccessError) as caught:
            await guarded(diagnose(f"redis://{HOST}:{port}/0"))
    assert str(caught.value).endswith(CHECK_LOGIN)
    down = f"redis://{HOST}:{await closed_port()}/0"
    outage = await guarded(diagnose(down))
    assert type(outage) is RedisUnavailableError
    assert (outage.url, type(outage.cause)) == (down, RedisConnectionError)
    redis = FakeRedis(b"+PONG\r\n")
    async with serving(redis) as port:
        assert await guarded(diagnose(f"redis://{HOST}:{port}/0")) is None
    assert redis.heard[-1] == b"*1\r\n$4\r\nPING\r\n"


def reset() -> RedisConnectionError:
    """As redis-py raises a connection reset: an outage by `classify`."""
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as cause:
        error = RedisConnectionError("Error while reading from socket: Connection reset by peer")
        error.__cause__ = cause
        return error


@pytest.mark.parametrize(
    ("trusted", "certificate", "reason", "fix"),
    [
        (str(TLS / "ca.pem"), False, "TLSV13_ALERT_CERTIFICATE_REQUIRED", CHECK_NO_CLIENT_CERTIFICATE),
        (None, True, "TLSV1_ALERT_UNKNOWN_CA", CHECK_CLIENT_CERTIFICATE),
    ],
)
async def test_a_reset_that_lost_a_certificate_alert_is_explained_by_the_alert(
    trusted: str | None, certificate: bool, reason: str, fix: str
) -> None:
    """A TLS client's reset (an outage to `classify`) becomes the refusal of the alert the probe reads, with
    the check for a certificate missing or not trusted."""
    async with serving(FakeTlsPort(server_context(trusted=trusted, require=True))) as port:
        client = tls_client(port, certificate=certificate)
        failure = await guarded(explain(client, reset()))
    assert isinstance(failure, RedisAccessError)
    alert = failure.cause
    assert isinstance(alert, ssl.SSLError) and alert.reason == reason
    tried = "TLS, certificate not verified" + (f", client certificate {CERT}" if certificate else "")
    assert str(failure) == refused(f"rediss://{HOST}:{port}/0", f"{tried}, no login", alert, fix)


async def test_a_reset_at_a_tls_port_that_takes_the_client_stays_an_outage() -> None:
    """The port speaks TLS (the client's protocol) and sends no alert: the outage, with the client's error."""
    async with serving(FakeTlsPort(server_context())) as port:
        client = tls_client(port)
        error = reset()
        failure = await guarded(explain(client, error))
    assert isinstance(failure, RedisUnavailableError)
    assert (failure.url, failure.cause) == (f"rediss://{HOST}:{port}/0", error)


async def test_a_reset_of_a_plaintext_client_at_a_tls_port_is_the_tls_port() -> None:
    """The probe, not the error, decides: a reset at a TLS port is the plaintext client's mistake."""
    async with serving(FakeTlsPort(server_context())) as port:
        client = aioredis.from_url(f"redis://{HOST}:{port}/0")
        error = reset()
        failure = await guarded(explain(client, error))
    assert isinstance(failure, RedisAccessError)
    assert failure.cause is error
    assert str(failure) == refused(f"redis://{HOST}:{port}/0", "plaintext, no login", error, CHECK_TLS_PORT)


async def test_a_reset_of_a_plaintext_client_at_a_port_that_resets_stays_an_outage() -> None:
    """A port that resets a TLS handshake too is down, not the other protocol: the outage."""
    async with serving(resetting) as port:
        failure = await guarded(explain(aioredis.from_url(f"redis://{HOST}:{port}/0"), reset()))
    assert type(failure) is RedisUnavailableError


async def test_a_refusal_is_explained_without_a_probe() -> None:
    """What `classify` calls a refusal is returned as it is: no port is asked."""
    redis = FakeRedis(b"+PONG\r\n")
    async with serving(redis) as port:
        client = aioredis.from_url(f"redis://{HOST}:{port}/0")
        failure = await guarded(explain(client, NoPermissionError("NOPERM no permissions to run 'set'")))
    assert isinstance(failure, RedisAccessError)
    assert str(failure).endswith(CHECK_PERMISSIONS)
    assert redis.heard == []
    assert await guarded(explain(client, ValueError("not Redis's"))) is None


@pytest.mark.parametrize(
    "url", ["unix:///run/redis.sock", "redis+sentinel://s1:26379/mymaster"], ids=["unix", "sentinel"]
)
async def test_a_client_without_a_host_and_a_port_is_not_probed(url: str) -> None:
    """Only a TCP address can be asked in the other protocol (a Sentinel client's pool names none: the
    primary is asked of the sentinels): the outage stays one."""
    error = reset()
    failure = await guarded(explain(redis_client(url), error))
    assert type(failure) is RedisUnavailableError and failure.cause is error


async def test_classified_raises_a_redis_error_as_what_it_stands_for() -> None:
    """A command refused after the PING (a user's permissions) is a `RedisAccessError` raised from it."""
    client = aioredis.from_url("redis://cache.example.net:6379/2")
    denied = NoPermissionError("NOPERM no permissions to run 'eval'")
    with pytest.raises(RedisAccessError) as caught:
        async with classified(client) as inside:
            assert inside is client
            raise denied
    assert str(caught.value) == refused(
        "redis://cache.example.net:6379/2", "plaintext, no login", denied, CHECK_PERMISSIONS
    )
    assert caught.value.__cause__ is denied


@pytest.mark.parametrize(
    "error", [ResponseError("ERR wrong number of arguments"), ValueError("no Redis error")], ids=type
)
async def test_classified_leaves_other_errors_as_they_are(error: Exception) -> None:
    """A Redis error that is no connection's failure, and an error that is not Redis's, pass unchanged."""
    with pytest.raises(type(error)) as caught:
        async with classified(aioredis.from_url("redis://cache:6379/0")):
            raise error
    assert caught.value is error


def test_the_caller_s_options_are_redis_py_s_over_this_process_s_settings() -> None:
    """`redis_client`'s keyword options override this process's settings (the connect timeout) and add
    to them."""
    client = redis_client("redis://cache:6379/0", socket_connect_timeout=0.5, socket_timeout=2.0)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (0.5, 2.0)
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache", 6379, 0)
