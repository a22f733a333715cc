"""Sentinels that name no primary, asked why (`redisconn/sentinel_probe.py`): a sentinel that refuses our
login or our TLS, or sentinels that all answer without the service, are a refusal (`RedisSentinelAccessError`,
exit 2) where a command starts and where `turnledger project` would wait for ever; sentinels that cannot be
reached, or that name the primary and see it down, stay the outage. No Redis: loopback fake sentinels
(tests/unit/fake_sentinel.py). On real sentinels: tests/integration/test_redis_sentinel.py."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Literal, NamedTuple

import pytest
from redis.asyncio import Redis
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.unit.cli_entry import said_by_entry_point
from tests.unit.fake_sentinel import NOAUTH, NOAUTH_HELLO, FakeSentinel, served_in_a_thread
from tests.unit.tls_servers import CERT, HOST, KEY, TLS, FakeTlsPort, closed_port, server_context, serving
from turnledger.errors import RedisSentinelAccessError, RedisSentinelUnavailableError, RedisUnavailableError
from turnledger.redisconn import probe, sentinel_probe
from turnledger.redisconn.client import classified, connect, diagnose, redis_client
from turnledger.redisconn.cluster import RedisClient
from turnledger.redisconn.refusals import (
    CHECK_CERTIFICATE,
    CHECK_CLIENT_CERTIFICATE,
    CHECK_NO_CLIENT_CERTIFICATE,
    CHECK_TLS,
    classify,
)
from turnledger.redisconn.sentinel_probe import Answer, Said, ask, judge

SERVICE = "mymaster"
LOGIN_FIX = (
    "Put the sentinels' own password (`requirepass` in sentinel.conf) in REDIS_SENTINEL_PASSWORD_FILE, or "
    "unset it for sentinels that require none; a password in REDIS_URL or REDIS_PASSWORD_FILE is the Redis "
    "nodes' login, not the sentinels'."
)
SERVICE_FIX = (
    "Name in REDIS_URL a service they monitor (redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]; "
    "`SENTINEL MASTERS` on a sentinel lists them), or have them monitor 'mymaster' "
    "(`sentinel monitor mymaster HOST PORT QUORUM`)."
)
NODE_PASSWORD = "n0de-s3cret"
SENTINEL_PASSWORD = "s3ntinel-pw"
WRONG_PASSWORD = "wr0ng-pw"
GUARD_S = 30.0
"""No connect here takes this long (at most a connect timeout and a probe): one that does is a hang."""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No REDIS_* setting of the machine's."""
    for name in list(os.environ):
        if name.startswith("REDIS_"):
            monkeypatch.delenv(name)
    return monkeypatch


def without_login(fake: FakeSentinel) -> str:
    """What a sentinel that wants a login answered redis-py's first command: HELLO (RESP3, redis-py 8)
    is refused in other words than a command (RESP2)."""
    said = NOAUTH_HELLO if fake.commands[0][0].upper() == "HELLO" else NOAUTH
    return said.removeprefix("NOAUTH ").rstrip(".")


async def refusal(url: str) -> RedisSentinelAccessError:
    with pytest.raises(RedisSentinelAccessError) as caught:
        await asyncio.wait_for(connect(url), GUARD_S)
    return caught.value


async def test_a_sentinel_that_wants_a_password_we_do_not_send_is_a_refusal() -> None:
    fake = FakeSentinel(password=SENTINEL_PASSWORD, monitors={SERVICE: (HOST, 6379)})
    async with serving(fake) as port:
        failure = await refusal(f"redis+sentinel://gateway:{NODE_PASSWORD}@{HOST}:{port}/{SERVICE}/0")
    said = f"{HOST}:{port} refused our login without a password (AuthenticationError: {without_login(fake)})"
    assert str(failure) == (
        f"Redis at 'redis+sentinel://gateway:***@{HOST}:{port}/mymaster/0': no sentinel named a primary for "
        f"'mymaster': {said}. {LOGIN_FIX}"
    )
    assert (failure.retriable, failure.service, failure.answers) == (False, SERVICE, (said,))
    assert isinstance(failure.__cause__, MasterNotFoundError)
    assert NODE_PASSWORD not in str(failure)


async def test_a_wrong_sentinel_password_is_a_refusal_that_never_shows_it(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "sentinel.password").write_text(f"{WRONG_PASSWORD}\n")
    clean_env.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "sentinel.password"))
    fake = FakeSentinel(password=SENTINEL_PASSWORD, monitors={SERVICE: (HOST, 6379)})
    async with serving(fake) as port:
        failure = await refusal(f"redis+sentinel://{HOST}:{port}/{SERVICE}")
    assert str(failure) == (
        f"Redis at 'redis+sentinel://{HOST}:{port}/mymaster/0': no sentinel named a primary for 'mymaster': "
        f"{HOST}:{port} refused our login with the password of REDIS_SENTINEL_PASSWORD_FILE "
        f"(AuthenticationError: invalid username-password pair or user is disabled). {LOGIN_FIX}"
    )
    assert WRONG_PASSWORD in " ".join(" ".join(command) for command in fake.commands), "the probe sent it"
    assert WRONG_PASSWORD not in str(failure) and SENTINEL_PASSWORD not in str(failure)


async def test_one_sentinel_refusing_our_login_and_one_unreachable_is_a_refusal_naming_both() -> None:
    """A sentinel that refuses our login says the setting is wrong for all of them (they share their
    password): waiting for the one that cannot be reached would not make ours right."""
    down = await closed_port()
    fake = FakeSentinel(password=SENTINEL_PASSWORD, monitors={SERVICE: (HOST, 6379)})
    async with serving(fake) as port:
        failure = await refusal(f"redis+sentinel://{HOST}:{down},{HOST}:{port}/{SERVICE}")
    message = str(failure)
    before = (
        f"Redis at 'redis+sentinel://{HOST}:{down},{HOST}:{port}/mymaster/0': no sentinel named a primary "
        f"for 'mymaster': {HOST}:{down} could not be asked (ConnectionError: "
    )
    after = (
        f"); {HOST}:{port} refused our login without a password (AuthenticationError: "
        f"{without_login(fake)}). {LOGIN_FIX}"
    )
    assert message.startswith(before) and message.endswith(after)
    assert f"{HOST}:{down}" in message[len(before) : -len(after)], "redis-py's words name the address"
    assert [answer.split(" ")[0] for answer in failure.answers] == [f"{HOST}:{down}", f"{HOST}:{port}"]


async def test_sentinels_that_all_answer_without_the_service_are_a_refusal() -> None:
    """As a URL that names a cluster node that is no cluster: the URL names what they do not have."""
    others = FakeSentinel(monitors={"other": (HOST, 6379)})
    async with serving(others) as first, serving(FakeSentinel()) as second:
        failure = await refusal(f"redis+sentinel://{HOST}:{first},{HOST}:{second}/{SERVICE}")
    assert str(failure) == (
        f"Redis at 'redis+sentinel://{HOST}:{first},{HOST}:{second}/mymaster/0': no sentinel named a primary "
        f"for 'mymaster': {HOST}:{first} does not monitor 'mymaster'; {HOST}:{second} does not monitor "
        f"'mymaster'. {SERVICE_FIX}"
    )
    assert isinstance(failure.cause, MasterNotFoundError)


async def test_a_sentinel_certificate_we_cannot_verify_is_a_refusal() -> None:
    """The fixtures' certificate is signed by no CA the system trusts."""
    async with serving(FakeTlsPort(server_context())) as port:
        failure = await refusal(f"rediss+sentinel://{HOST}:{port}/{SERVICE}")
    message = str(failure)
    before = (
        f"Redis at 'rediss+sentinel://{HOST}:{port}/mymaster/0': no sentinel named a primary for 'mymaster': "
        f"{HOST}:{port} sent a certificate we cannot verify (ConnectionError: "
    )
    assert message.startswith(before) and message.endswith(f"). {CHECK_CERTIFICATE}")
    assert "CERTIFICATE_VERIFY_FAILED" in message[len(before) :]


@pytest.mark.parametrize("others", ["closed", "unknown service"])
async def test_sentinels_that_cannot_be_reached_stay_the_outage(others: str) -> None:
    """One that cannot be reached may monitor the service: waiting may help."""
    first = await closed_port()
    async with serving(FakeSentinel()) as unknowing:
        second = await closed_port() if others == "closed" else unknowing
        url = f"redis+sentinel://{HOST}:{first},{HOST}:{second}/{SERVICE}"
        with pytest.raises(RedisSentinelUnavailableError) as caught:
            await asyncio.wait_for(connect(url), GUARD_S)
        waited = await asyncio.wait_for(diagnose(url), GUARD_S)  # a service waits it out
    assert caught.value.retriable
    assert caught.value.sentinels == (f"{HOST}:{first}", f"{HOST}:{second}")
    assert isinstance(waited, RedisSentinelUnavailableError)
    assert str(waited) == str(caught.value)


async def test_a_sentinel_that_names_the_primary_keeps_the_outage_whatever_the_others_say() -> None:
    """It sees the primary down (a failover not done yet): the outage, though another refuses us."""
    seeing_down = FakeSentinel(monitors={SERVICE: (HOST, 6379)}, down=frozenset({SERVICE}))
    refusing = FakeSentinel(password=SENTINEL_PASSWORD)
    async with serving(refusing) as first, serving(seeing_down) as second:
        with pytest.raises(RedisSentinelUnavailableError) as caught:
            await asyncio.wait_for(
                connect(f"redis+sentinel://{HOST}:{first},{HOST}:{second}/{SERVICE}"), GUARD_S
            )
    assert caught.value.retriable
    assert ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE] in seeing_down.commands


async def test_a_refusing_sentinel_ends_the_start_of_a_service_that_waits_out_outages() -> None:
    """`diagnose`, which `turnledger project` runs before following: the refusal, not a return."""
    async with serving(FakeSentinel(password=SENTINEL_PASSWORD)) as port:
        with pytest.raises(RedisSentinelAccessError):
            await asyncio.wait_for(diagnose(f"redis+sentinel://{HOST}:{port}/{SERVICE}"), GUARD_S)


async def test_a_silent_sentinel_is_asked_for_at_most_twice_probe_timeout_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once in our protocol, once more in the other (`looked_again`: a TLS handshake it never answers),
    each for `PROBE_TIMEOUT_S`, not for `probe.PROBE_TIMEOUT_S` (3 s)."""
    monkeypatch.setattr(sentinel_probe, "PROBE_TIMEOUT_S", 0.3)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the probe closes
        writer.close()

    async with serving(silent) as port:
        client = redis_client(f"redis+sentinel://{HOST}:{port}/{SERVICE}")
        [sentinel] = client.connection_pool.sentinel_manager.sentinels
        began = time.monotonic()
        answer = await asyncio.wait_for(ask(sentinel, f"{HOST}:{port}", SERVICE), GUARD_S)
        took = time.monotonic() - began
    assert answer == Answer(f"{HOST}:{port}", Said.NOTHING, f"{HOST}:{port} did not answer within 0.3s")
    assert 0.6 <= took < 2.0


def test_a_client_without_sentinels_has_no_sentinel_refusal() -> None:
    assert (
        asyncio.run(
            sentinel_probe.sentinel_refusal(redis_client("redis://cache:6379/0"), MasterNotFoundError("x"))
        )
        is None
    )


@pytest.mark.parametrize(
    ("said", "refusal"),
    [
        ((), None),
        ((Said.NOTHING,), None),
        ((Said.NOTHING, Said.NO_SUCH_SERVICE), None),
        ((Said.NO_SUCH_SERVICE, Said.NO_SUCH_SERVICE), SERVICE_FIX),
        ((Said.NOTHING, Said.REFUSED), LOGIN_FIX),
        ((Said.NO_SUCH_SERVICE, Said.REFUSED), LOGIN_FIX),
        ((Said.REFUSED, Said.PRIMARY), None),
    ],
)
def test_the_rule_over_what_the_sentinels_said(said: tuple[Said, ...], refusal: str | None) -> None:
    refused = RedisConnectionError("refused")
    answers = [
        Answer(f"s{n}:1", kind, f"s{n} {kind.name}", refused if kind is Said.REFUSED else None, LOGIN_FIX)
        for n, kind in enumerate(said)
    ]
    failure = judge("redis+sentinel://s0:1/mymaster/0", SERVICE, answers, MasterNotFoundError("none"))
    if refusal is None:
        assert failure is None
        return
    assert failure is not None
    assert str(failure) == (
        "Redis at 'redis+sentinel://s0:1/mymaster/0': no sentinel named a primary for 'mymaster': "
        f"{'; '.join(answer.text for answer in answers)}. {refusal}"
    )


async def test_turnledger_project_ends_at_once_with_exit_2_where_it_waited_for_ever() -> None:
    """The follower waits out outages (`diagnose` returns on one): sentinels that refuse our login were
    one, waited out for ever."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("REDIS_")}
    async with serving(FakeSentinel(password=SENTINEL_PASSWORD)) as port:
        url = f"redis+sentinel://{HOST}:{port}/{SERVICE}"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "turnledger.cli",
            "project",
            env={**env, "REDIS_URL": url, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), 60)
        except TimeoutError:
            process.kill()
            await process.wait()
            pytest.fail("turnledger project waited for sentinels that refuse its login")
    last = stderr.decode().splitlines()[-1]
    assert process.returncode == 2
    assert last.startswith(
        f"turnledger: Redis at 'redis+sentinel://{HOST}:{port}/mymaster/0': no sentinel named a primary for "
        f"'mymaster': {HOST}:{port} refused our login without a password (AuthenticationError: "
    )
    assert last.endswith(f"). {LOGIN_FIX}")
    assert "Traceback" not in stderr.decode()


def test_turnledger_project_asks_sentinels_that_see_the_primary_down_once_at_its_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`diagnose` asks them why before following; the script's load, which meets the same outage at once
    (here given up on at once: --max-outage 0), does not ask them again (`Rechecks.asked`)."""
    fake = FakeSentinel(monitors={SERVICE: (HOST, 6379)}, down=frozenset({SERVICE}))
    with served_in_a_thread(fake) as port:
        url = f"redis+sentinel://{HOST}:{port}/{SERVICE}"
        args = ["--redis-url", url, "--bootstrap", "k:1", "--static", "--max-outage", "0"]
        code, said = said_by_entry_point(monkeypatch, capsys, "project", *args)
    asked = [command for command in fake.commands if command[:2] == ["SENTINEL", "GET-MASTER-ADDR-BY-NAME"]]
    assert code == 2
    assert said[-1].startswith(
        f"turnledger project: Redis is not reachable at '{url}/0': no sentinel of {HOST}:{port} named a "
        "primary for 'mymaster' "
        "(MasterNotFoundError: No master found for 'mymaster'). Check that the sentinels run"
    )
    assert asked == [["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]]


# --- what is no sentinel, or will not serve us: refusals too ---------------------------------------------

NOT_SENTINEL_FIX = (
    "A redis+sentinel:// URL names sentinels (their port, 26379 by default), not Redis nodes: put the "
    "sentinels' HOST:PORT in REDIS_URL, or name this Redis itself with redis:// (rediss:// for TLS)."
)
PERMISSIONS_FIX = (
    "The sentinels' default user (the one REDIS_SENTINEL_PASSWORD_FILE's password logs in as) may not run "
    "the SENTINEL commands turnledger asks: allow it `+sentinel|masters +sentinel|get-master-addr-by-name` "
    "(or `+@all`) in each sentinel's ACL (`user default ...` in sentinel.conf, or ACL SETUSER)."
)
PLAINTEXT_PORT_FIX = (
    "This sentinel's port speaks plaintext, not TLS: rediss+sentinel:// speaks TLS to the sentinels and the "
    "nodes alike; use redis+sentinel:// in REDIS_URL for sentinels without TLS, or their TLS port."
)
TLS_PORT_FIX = (
    "This sentinel's port speaks TLS: use rediss+sentinel:// in REDIS_URL (with REDIS_SSL_CA_FILE for a "
    "private CA), or the sentinels' plaintext port."
)


def said_of(failure: RedisSentinelAccessError, url: str) -> tuple[str, str]:
    """What the one sentinel said, and the fix, of a refusal's whole message (checked to be the
    message's shape)."""
    head = f"Redis at '{url}': no sentinel named a primary for 'mymaster': "
    [said] = failure.answers
    message = str(failure)
    assert message.startswith(head + said + ". ")
    return said, message[len(head + said + ". ") :]


async def test_a_plain_redis_named_as_a_sentinel_is_a_refusal() -> None:
    """A redis-server out of sentinel mode has no SENTINEL command: the URL names the wrong port."""
    fake = FakeSentinel(sentinel=False, monitors={SERVICE: (HOST, 6379)})
    async with serving(fake) as port:
        url = f"redis+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(url)
    assert said_of(failure, url) == (
        f"{HOST}:{port} is a Redis, not a sentinel (ResponseError: unknown command 'SENTINEL', with args "
        "beginning with: 'GET-MASTER-ADDR-BY-NAME' 'mymaster' )",
        NOT_SENTINEL_FIX,
    )
    assert (failure.retriable, type(failure.cause).__name__) == (False, "ResponseError")


@pytest.mark.parametrize("reply", ["unknown command 'SENTINEL', with", "unknown command `SENTINEL`, with"])
def test_both_spellings_of_an_unknown_sentinel_command_are_no_sentinel(reply: str) -> None:
    """Redis 6.2 on quotes the command, older Redis put it in backticks."""
    client = redis_client("redis+sentinel://s1:26379/mymaster")
    [sentinel] = client.connection_pool.sentinel_manager.sentinels
    answer = sentinel_probe.refused(sentinel, "s1:26379", ResponseError(reply))
    assert (answer.said, answer.fix) == (Said.REFUSED, NOT_SENTINEL_FIX)
    other = sentinel_probe.refused(sentinel, "s1:26379", ResponseError("unknown command 'MASTERS', with"))
    assert other.said is Said.NOTHING


@pytest.mark.parametrize("password", [False, True], ids=["no password", "a password"])
async def test_a_sentinel_whose_user_may_not_run_sentinel_commands_is_a_refusal(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, password: bool
) -> None:
    """`-NOPERM`: its ACL takes our login but not SENTINEL; redis-py's NoPermissionError."""
    if password:
        (tmp_path / "sentinel.password").write_text(SENTINEL_PASSWORD)
        clean_env.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "sentinel.password"))
    fake = FakeSentinel(
        password=SENTINEL_PASSWORD if password else None, monitors={SERVICE: (HOST, 6379)}, may_ask=False
    )
    async with serving(fake) as port:
        url = f"redis+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(url)
    login = "with the password of REDIS_SENTINEL_PASSWORD_FILE" if password else "without a password"
    assert said_of(failure, url) == (
        f"{HOST}:{port} took our login {login} but may not let it run SENTINEL (NoPermissionError: User "
        "default has no permissions to run the 'sentinel|get-master-addr-by-name' command)",
        PERMISSIONS_FIX,
    )
    assert SENTINEL_PASSWORD not in str(failure)


@pytest.mark.parametrize("on_tls", ["close", "wait"])
async def test_tls_spoken_to_a_plaintext_sentinel_is_a_refusal(
    monkeypatch: pytest.MonkeyPatch, on_tls: Literal["close", "wait"]
) -> None:
    """A ClientHello is no command: the sentinel closes, or waits for the rest of the line (the connect
    timeout). Either is no refusal from inside the connection; a plaintext PING answered is."""
    monkeypatch.setattr(sentinel_probe, "PROBE_TIMEOUT_S", 0.5)
    fake = FakeSentinel(monitors={SERVICE: (HOST, 6379)}, on_tls=on_tls)
    async with serving(fake) as port:
        url = f"rediss+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(f"{url}?socket_connect_timeout=0.5")
    said, fix = said_of(failure, url)
    happened = {
        "close": f"ConnectionError: Error connecting to {HOST}:{port}",
        "wait": "no answer within 0.5s",
    }
    assert said == f"{HOST}:{port} speaks plaintext, not TLS (in TLS: {happened[on_tls]})"
    assert fix == PLAINTEXT_PORT_FIX
    assert ["PING"] in fake.commands


async def test_tls_answered_with_redis_s_protocol_error_is_a_failed_handshake() -> None:
    """Its `-ERR` read as a TLS record: the TLS rule of the refusal table (`refusals.CHECK_TLS`)."""
    fake = FakeSentinel(monitors={SERVICE: (HOST, 6379)}, on_tls="error")
    async with serving(fake) as port:
        url = f"rediss+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(url)
    said, fix = said_of(failure, url)
    assert said.startswith(f"{HOST}:{port} failed the TLS handshake (ConnectionError: ")
    assert "WRONG_VERSION_NUMBER" in said or "RECORD_LAYER_FAILURE" in said
    assert fix == CHECK_TLS
    assert isinstance(failure.cause, ssl.SSLError)


async def test_plaintext_spoken_to_a_tls_sentinel_is_a_refusal() -> None:
    """The TLS port takes our RESP for a broken handshake and closes; a handshake completes."""
    async with serving(FakeTlsPort(server_context())) as port:
        url = f"redis+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(url)
    assert said_of(failure, url) == (
        f"{HOST}:{port} speaks TLS, not plaintext (in plaintext: ConnectionError: Connection closed by "
        "server)",
        TLS_PORT_FIX,
    )


@pytest.mark.parametrize("lost", [0, 2], ids=["read", "lost to a reset"])
async def test_a_sentinel_that_refuses_our_client_certificate_is_a_refusal(
    monkeypatch: pytest.MonkeyPatch, lost: int
) -> None:
    """Its alert read by the probe, or lost to a reset by redis-py's handshake and the probe's (then a
    handshake that only reads finds it, `probe.certificate_refusal`)."""
    monkeypatch.setattr(probe, "ALERT_WAIT_S", 0.5)
    tls = FakeTlsPort(server_context(trusted=str(TLS / "ca.pem"), require=True), lose_alerts=lost)
    async with serving(tls) as port:
        url = f"rediss+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(f"{url}?ssl_cert_reqs=none")
    said, fix = said_of(failure, url)
    assert said.startswith(f"{HOST}:{port} refused our client certificate (")
    assert "TLSV13_ALERT_CERTIFICATE_REQUIRED" in said
    assert fix == CHECK_NO_CLIENT_CERTIFICATE
    assert isinstance(failure.cause, ssl.SSLError)
    assert failure.cause.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls.failures[:lost] == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"] * lost


async def test_a_refused_client_certificate_names_the_one_given(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("REDIS_SSL_CERT_FILE", CERT)
    clean_env.setenv("REDIS_SSL_KEY_FILE", KEY)
    async with serving(FakeTlsPort(server_context(trusted=None, require=True))) as port:
        url = f"rediss+sentinel://{HOST}:{port}/mymaster/0"
        failure = await refusal(f"{url}?ssl_cert_reqs=none")
    said, fix = said_of(failure, url)
    assert "TLSV1_ALERT_UNKNOWN_CA" in said and fix == CHECK_CLIENT_CERTIFICATE


async def test_a_sentinel_that_is_down_is_asked_again_in_no_time() -> None:
    """Nothing listens: the other protocol and the alert are asked of a closed port, which refuses at
    once; the outage stays one."""
    down = await closed_port()
    for scheme in ("redis", "rediss"):
        began = time.monotonic()
        with pytest.raises(RedisSentinelUnavailableError):
            await asyncio.wait_for(connect(f"{scheme}+sentinel://{HOST}:{down}/{SERVICE}"), GUARD_S)
        assert time.monotonic() - began < 2.0


# --- where the outage is met mid-run ---------------------------------------------------------------------


@pytest.mark.parametrize("raised", ["redis-py's", "classified"])
async def test_classified_asks_the_sentinels_of_an_outage_met_after_the_start(raised: str) -> None:
    """`history`, `status`, `project --until-caught-up`, `replay rebuild`: a command after the start
    meets sentinels that name no primary (redis-py's error, or the projector's classified one) and asks
    them why."""
    async with serving(FakeSentinel(password=SENTINEL_PASSWORD)) as port:
        client = redis_client(f"redis+sentinel://{HOST}:{port}/{SERVICE}")
        none_found = MasterNotFoundError("No master found for 'mymaster'")
        error = none_found if raised == "redis-py's" else classify(none_found, client)
        with pytest.raises(RedisSentinelAccessError) as caught:
            async with classified(client):
                raise error
    assert caught.value.__cause__ is error
    assert str(caught.value).endswith(LOGIN_FIX)


async def test_classified_keeps_redis_py_s_error_as_the_cause_of_a_service_none_monitors() -> None:
    """Of a sentinel outage classified already, the refusal's cause is redis-py's error, not the outage."""
    async with serving(FakeSentinel()) as port:
        client = redis_client(f"redis+sentinel://{HOST}:{port}/{SERVICE}")
        none_found = MasterNotFoundError("No master found for 'mymaster'")
        outage = classify(none_found, client)
        with pytest.raises(RedisSentinelAccessError) as caught:
            async with classified(client):
                raise outage  # type: ignore[misc]
    assert (caught.value.cause, caught.value.__cause__) == (none_found, outage)
    assert str(caught.value).endswith(SERVICE_FIX)


async def test_classified_keeps_an_outage_of_sentinels_that_cannot_be_reached() -> None:
    client = redis_client(f"redis+sentinel://{HOST}:{await closed_port()}/{SERVICE}")
    outage = classify(MasterNotFoundError("No master found for 'mymaster'"), client)
    with pytest.raises(RedisSentinelUnavailableError) as caught:
        async with classified(client):
            raise outage  # type: ignore[misc]
    assert caught.value is outage


@pytest.mark.parametrize(
    "command", [["history", "c1"], ["status", "op-1"], ["project", "--until-caught-up", "--bootstrap", "k:1"]]
)
def test_a_command_that_meets_refusing_sentinels_after_its_start_ends_in_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """The client connected (`connect` stands in for a start when they still took us); its next
    command finds sentinels that refuse our login (their password changed meanwhile)."""
    from turnledger.projections import cli as projections_cli
    from turnledger.projections.projector import Projector

    async def connected(url: str) -> RedisClient:
        return redis_client(url)

    async def run_to_end(self: Projector, *args: object, **kwargs: object) -> None:
        raise classify(MasterNotFoundError("No master found for 'mymaster'"), self.redis) or AssertionError()

    monkeypatch.setattr(projections_cli, "connect", connected)
    monkeypatch.setattr(Projector, "run_to_end", run_to_end)
    with served_in_a_thread(FakeSentinel(password=SENTINEL_PASSWORD)) as port:
        url = f"redis+sentinel://{HOST}:{port}/{SERVICE}"
        code, said = said_by_entry_point(monkeypatch, capsys, *command, "--redis-url", url)
    assert code == 2
    assert said[-1].startswith(
        f"turnledger: Redis at '{url}/0': no sentinel named a primary for 'mymaster': {HOST}:{port} refused "
        "our login without a password (AuthenticationError: "
    )
    assert said[-1].endswith(f"). {LOGIN_FIX}")
    assert not any("Traceback" in line for line in said)


def test_a_rebuild_that_meets_refusing_sentinels_after_its_start_ends_in_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnledger.replay import cli as replay_cli

    async def connected(url: str) -> RedisClient:
        return redis_client(url)

    async def rebuild(redis: RedisClient, *args: object, **kwargs: object) -> None:
        await redis.ping()

    monkeypatch.setattr(replay_cli, "connect", connected)
    monkeypatch.setattr("turnledger.replay.rebuild.rebuild", rebuild)
    with served_in_a_thread(FakeSentinel(password=SENTINEL_PASSWORD)) as port:
        url = f"redis+sentinel://{HOST}:{port}/{SERVICE}"
        args = ["--redis-url", url, "--bootstrap", "k:1", "--no-verify"]
        code, said = said_by_entry_point(monkeypatch, capsys, "replay", "rebuild", *args)
    assert code == 2
    head = (
        f"turnledger: Redis at '{url}/0': no sentinel named a primary for 'mymaster': {HOST}:{port} refused"
    )
    assert said[-1].startswith(head)
    assert said[-1].endswith(f"). {LOGIN_FIX}")


# --- the probe's parts, each answer whole -----------------------------------------------------------------


def one_sentinel(url: str = "redis+sentinel://s1:26379/mymaster") -> Redis:
    [sentinel] = redis_client(url).connection_pool.sentinel_manager.sentinels
    return sentinel


def test_what_one_sentinel_s_error_says_whole() -> None:
    """The refusal, and what it reports; or that it could not be asked, with the error itself. The cause is
    said without its closing period alone."""
    login = AuthenticationError("Authentication required.")
    assert sentinel_probe.refused(one_sentinel(), "s1:26379", login) == Answer(
        "s1:26379",
        Said.REFUSED,
        "s1:26379 refused our login without a password (AuthenticationError: Authentication required)",
        login,
        LOGIN_FIX,
    )
    odd = ResponseError("ERR a reply ending in X.")
    assert sentinel_probe.refused(one_sentinel(), "s1:26379", odd) == Answer(
        "s1:26379", Said.NOTHING, "s1:26379 could not be asked (ResponseError: ERR a reply ending in X)", odd
    )
    assert sentinel_probe.cause_of(RedisConnectionError("down X")) == "ConnectionError: down X"


async def test_what_a_sentinel_that_answers_says_whole() -> None:
    fake = FakeSentinel(monitors={SERVICE: (HOST, 6379)})
    async with serving(fake) as port:
        sentinel = one_sentinel(f"redis+sentinel://{HOST}:{port}/{SERVICE}")
        address = f"{HOST}:{port}"
        named = await asyncio.wait_for(ask(sentinel, address, SERVICE), GUARD_S)
        unknown = await asyncio.wait_for(ask(sentinel, address, "other"), GUARD_S)
    assert named == Answer(address, Said.PRIMARY, f"{address} names a primary for 'mymaster'")
    assert unknown == Answer(address, Said.NO_SUCH_SERVICE, f"{address} does not monitor 'other'")
    assert (named.error, named.fix, unknown.error, unknown.fix) == (None, None, None, None)


async def test_a_sentinel_asked_again_in_the_other_protocol_is_said_whole() -> None:
    """What our own protocol met (its error, as `cause_of` says it) and the fix, the error kept."""
    async with serving(FakeTlsPort(server_context())) as port:
        address = f"{HOST}:{port}"
        sentinel = one_sentinel(f"redis+sentinel://{address}/{SERVICE}")
        error = RedisConnectionError("Connection closed by server X.")
        before = Answer(address, Said.NOTHING, f"{address} could not be asked", error)
        answer = await asyncio.wait_for(sentinel_probe.looked_again(sentinel, before, error, "it X"), GUARD_S)
    assert answer == Answer(
        address,
        Said.REFUSED,
        f"{address} speaks TLS, not plaintext (in plaintext: it X)",
        error,
        TLS_PORT_FIX,
    )


def test_a_cluster_client_has_no_sentinel_refusal() -> None:
    """It has no connection pool of its own."""
    client = redis_client("redis+cluster://n1:7000")
    assert asyncio.run(sentinel_probe.sentinel_refusal(client, MasterNotFoundError("x"))) is None


@pytest.mark.parametrize("refused", [True, False], ids=["they refuse us", "they are down"])
async def test_an_attempt_whose_sentinels_refuse_us_raises_the_refusal(
    monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """`Rechecks.attempting`: redis-py's own error, classified with the client's sentinels, asked why."""
    client = redis_client("redis+sentinel://s1:26379/mymaster")
    none_found = MasterNotFoundError("No master found for 'mymaster'")
    refusal = RedisSentinelAccessError("u", SERVICE, ["s1:26379 refused"], none_found, "fix")
    asked: list[tuple[object, BaseException]] = []

    async def sentinel_refusal(asked_of: object, exc: BaseException) -> RedisSentinelAccessError | None:
        asked.append((asked_of, exc))
        return refusal if refused else None

    async def attempt() -> None:
        raise none_found

    monkeypatch.setattr(sentinel_probe, "sentinel_refusal", sentinel_refusal)
    with pytest.raises(Exception) as raised:
        await sentinel_probe.Rechecks(client).attempting(attempt)()
    assert raised.value is (refusal if refused else none_found)
    assert asked == [(client, none_found)]


def _raised_from(cause: BaseException) -> RedisConnectionError:
    """redis-py's ConnectionError raised from `cause`, as its connection raises it."""
    try:
        raise RedisConnectionError("Error connecting to s1:26379") from cause
    except RedisConnectionError as error:
        return error


@pytest.mark.parametrize(
    ("cause", "said"),
    [
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), Said.NOTHING),
        (ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF)"), Said.NOTHING),
        (ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), Said.REFUSED),
    ],
    ids=type,
)
def test_a_tls_connection_that_only_ended_is_no_failed_handshake(cause: BaseException, said: Said) -> None:
    """An EOF or a closed session is the peer going away (asked again: `looked_again`); another TLS error
    is a handshake that failed (`refusals.CHECK_TLS`)."""
    answer = sentinel_probe.refused(one_sentinel(), "s1:26379", _raised_from(cause))
    assert answer.said is said
    assert answer.fix == (CHECK_TLS if said is Said.REFUSED else None)


def test_the_bounds_the_docs_give() -> None:
    """README and docs/architecture.md: 3 s for a sentinel's answer; asked again at most every 30 s."""
    assert sentinel_probe.PROBE_TIMEOUT_S == 3.0


class _Asking(NamedTuple):
    """Rechecks on a clock the test moves, the sentinel answers it asked for, and an outage."""

    rechecks: sentinel_probe.Rechecks
    asks: list[BaseException]
    now: list[float]
    none_found: MasterNotFoundError
    outage: RedisSentinelUnavailableError


def _asking(monkeypatch: pytest.MonkeyPatch) -> _Asking:
    now = [1000.0]
    rechecks = sentinel_probe.Rechecks(redis_client("redis+sentinel://s1/mymaster"), clock=lambda: now[0])
    asks: list[BaseException] = []

    async def sentinel_refusal(client: object, exc: BaseException) -> None:
        asks.append(exc)

    monkeypatch.setattr(sentinel_probe, "sentinel_refusal", sentinel_refusal)
    none_found = MasterNotFoundError("No master found for 'mymaster'")
    outage = RedisSentinelUnavailableError("u", ["s1:26379"], SERVICE, none_found, "none")
    return _Asking(rechecks, asks, now, none_found, outage)


@pytest.mark.parametrize(("then", "asked"), [(29.9, 0), (30.0, 1)])
async def test_an_outage_diagnose_asked_about_is_asked_again_30_s_later_not_at_its_first_sighting(
    monkeypatch: pytest.MonkeyPatch, then: float, asked: int
) -> None:
    """`Rechecks.asked`: `turnledger project`'s `diagnose` asked the sentinels just before the load meets
    the outage."""
    a = _asking(monkeypatch)
    a.rechecks.asked(a.outage)
    a.now[0] += then
    assert await a.rechecks.refusal(a.outage, a.none_found) is None
    assert a.asks == [a.none_found] * asked


@pytest.mark.parametrize(
    "diagnosed",
    [None, RedisUnavailableError("redis://r:1/0", RedisConnectionError("refused"))],
    ids=["Redis answered", "not a sentinel outage"],
)
async def test_what_diagnose_met_without_asking_sentinels_leaves_the_first_sighting_asked(
    monkeypatch: pytest.MonkeyPatch, diagnosed: RedisUnavailableError | None
) -> None:
    a = _asking(monkeypatch)
    a.rechecks.asked(diagnosed)
    assert await a.rechecks.refusal(a.outage, a.none_found) is None
    assert a.asks == [a.none_found]


@pytest.mark.parametrize(("then", "asked"), [(29.9, 1), (30.0, 2)])
async def test_a_lasting_outage_is_asked_again_after_30_s(
    monkeypatch: pytest.MonkeyPatch, then: float, asked: int
) -> None:
    a = _asking(monkeypatch)
    assert await a.rechecks.refusal(a.outage, a.none_found) is None
    a.now[0] += then
    assert await a.rechecks.refusal(a.outage, a.none_found) is None
    assert a.asks == [a.none_found] * asked
