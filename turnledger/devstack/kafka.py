"""Format and start a single-node KRaft (combined broker+controller) Kafka from the cached jars.

Ready means more than "port open": a topic can be created and a transactional producer can initialise.
That also creates `__transaction_state` up front, so the first test does not pay for it.

Beside its PLAINTEXT listener the broker has a SASL_SSL one, so that clients configured for a
managed cluster (turnledger.kafka.connection) can be tested against a real login: SCRAM-SHA-512,
SCRAM-SHA-256 and PLAIN for the user `turnledger`, whose random password is kept in
`<workdir>/sasl.password` (0600) as long as the data it was formatted with, over TLS with a
certificate of the devstack's own CA (devstack/tls.py). It is ready only once a SCRAM-SHA-512 login
over TLS works too.

A fourth listener, SSL with `ssl.client.auth=required`, takes only clients that present a certificate
of the devstack's CA (mutual TLS, as Aiven's clusters do by default); the devstack's own client
certificate for CN=turnledger is in `tls/client.pem` and `tls/client.key`. It is left out when openssl,
which makes that certificate's key, is missing; when it is there, the broker is ready only once a
record was produced through it with that certificate.

A fifth, `OAUTH` (SASL_SSL with OAUTHBEARER only), takes a bearer token signed by the devstack's
token key (devstack/identity.py) and validated by Kafka's own OIDC validator, as a managed cluster's
is. `dev up` mints a token for `sub=turnledger` valid for a week into `<workdir>/oauth.token` (0600),
the file its `# SASL_SSL OAUTHBEARER:` line points clients at; tests fetch theirs from a
`TokenEndpoint` signing with the same key. It is left out without openssl, and when it is there the
broker is ready only once a record was produced through it with that token.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError

from turnledger.devstack import procs
from turnledger.devstack.aio import run_sync
from turnledger.devstack.credentials import stored_password, write_private
from turnledger.devstack.errors import DevstackError, PortInUse, ServiceNotReady
from turnledger.devstack.identity import AUDIENCE, ISSUER, SigningKey, ensure_signing_key
from turnledger.devstack.jars import KafkaJars, require_java
from turnledger.devstack.kafka_admin import create_topic
from turnledger.devstack.ports import free_port, port_is_free, tcp_open
from turnledger.devstack.settings import ENV_BOOTSTRAP
from turnledger.devstack.tls import BrokerTls, ClientTls, ensure_broker_tls, openssl
from turnledger.kafka import connection, oauth
from turnledger.kafka.connection import KafkaSecurity

READY_TOPIC = "__turnledger_ready"

SASL_USERNAME = "turnledger"
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
"""Enabled on the SASL_SSL listener: every mechanism turnledger.kafka.connection can log in with."""
SCRAM_MECHANISMS = tuple(name for name in SASL_MECHANISMS if name.startswith("SCRAM-"))
"""Their credentials are KRaft metadata, added when the storage is formatted."""
READY_MECHANISM = "SCRAM-SHA-512"
"""The login the readiness probe makes, and the one `dev up` prints: what managed clusters ask for."""
SASL_PASSWORD_FILE = "sasl.password"
OAUTH_TOKEN_FILE = "oauth.token"
OAUTH_JWKS_FILE = "oauth-jwks.json"
OAUTH_SUBJECT = "turnledger"
OAUTH_TOKEN_LIFETIME_S = 7 * 24 * 3600
"""`dev up`'s token outlives any working stack; a restart mints a new one."""
OAUTH_REAUTH_MS = 3_600_000
"""A session on the OAUTH listener ends after an hour, or when its token expires if that is sooner."""
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
"""Kafka 3.9.1/4.0+ (CVE-2025-27817) fetch a JWKS or a token only from the URLs this JVM system
property lists; 4.x allows none by default."""


@dataclass(frozen=True)
class SecuredListener:
    """The broker's SASL_SSL listener and what a client logs in to it with."""

    bootstrap: str
    username: str
    password_file: Path
    ca_file: Path

    def client_env(self, mechanism: str = READY_MECHANISM) -> dict[str, str]:
        """The variables that point a turnledger client at it (the password by its file, so that it is
        never printed nor in an environment that `ps e` shows)."""
        return {
            ENV_BOOTSTRAP: self.bootstrap,
            connection.ENV_PROTOCOL: "SASL_SSL",
            connection.ENV_MECHANISM: mechanism,
            connection.ENV_USERNAME: self.username,
            connection.ENV_PASSWORD_FILE: str(self.password_file),
            connection.ENV_CA_FILE: str(self.ca_file),
        }


def secured_client_env(
    bootstrap: str | None,
    username: str | None,
    password_file: str | None,
    ca_file: str | None,
    mechanism: str = READY_MECHANISM,
) -> dict[str, str] | None:
    """`SecuredListener.client_env` from recorded fields (stack.json, Endpoints); None unless all are
    known: an external or a Docker broker, or a stack recorded before the listener existed."""
    if not (bootstrap and username and password_file and ca_file):
        return None
    return SecuredListener(bootstrap, username, Path(password_file), Path(ca_file)).client_env(mechanism)


@dataclass(frozen=True)
class MutualTlsListener:
    """The broker's SSL listener, which requires a client certificate, and the PEM files a client
    presents there (the devstack's certificate for CN=turnledger) and verifies the broker with."""

    bootstrap: str
    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_env(self) -> dict[str, str]:
        """The variables that point a turnledger client at it: the certificate and its key by their
        files, as a managed cluster's (Aiven's) are given."""
        return {
            ENV_BOOTSTRAP: self.bootstrap,
            connection.ENV_PROTOCOL: "SSL",
            connection.ENV_CA_FILE: str(self.ca_file),
            connection.ENV_CERT_FILE: str(self.cert_file),
            connection.ENV_KEY_FILE: str(self.key_file),
        }


@dataclass(frozen=True)
class OAuthListener:
    """The broker's OAUTHBEARER listener (SASL_SSL), `dev up`'s token for it, and the key the broker
    trusts tokens of (what a test's `TokenEndpoint` signs with)."""

    bootstrap: str
    ca_file: Path
    token_file: Path
    signing_key: Path

    def client_env(self) -> dict[str, str]:
        """The variables that point a turnledger client at it with `dev up`'s token file."""
        return {
            ENV_BOOTSTRAP: self.bootstrap,
            connection.ENV_PROTOCOL: "SASL_SSL",
            connection.ENV_MECHANISM: connection.OAUTHBEARER,
            oauth.ENV_TOKEN_FILE: str(self.token_file),
            connection.ENV_CA_FILE: str(self.ca_file),
        }


def oauth_client_env(
    bootstrap: str | None, ca_file: str | None, token_file: str | None
) -> dict[str, str] | None:
    """`OAuthListener.client_env` from recorded fields; None unless all are known."""
    if not (bootstrap and ca_file and token_file):
        return None
    return OAuthListener(bootstrap, Path(ca_file), Path(token_file), Path()).client_env()


def mtls_client_env(
    bootstrap: str | None, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> dict[str, str] | None:
    """`MutualTlsListener.client_env` from recorded fields (stack.json, Endpoints); None unless all
    are known: an external or a Docker broker, a stack made without openssl or recorded before the
    listener existed."""
    if not (bootstrap and ca_file and cert_file and key_file):
        return None
    return MutualTlsListener(bootstrap, Path(ca_file), Path(cert_file), Path(key_file)).client_env()


@dataclass(frozen=True)
class ExtraListener:
    """One more listener for a broker a test starts for itself (a Kerberos one: `devstack/kerberos.py`),
    so that a test needing a login the shared devstack does not offer reuses this module's broker
    rather than starting a second kind. Its lines are the listener's own (`listener.name.<name>.*`);
    `jvm_options` are what its login needs of the JVM (`-Djava.security.krb5.conf=...`)."""

    name: str
    protocol: str
    port: int
    settings: tuple[str, ...]
    jvm_options: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class KafkaProcess:
    pid: int
    bootstrap: str
    log: Path
    marker: str
    version: str
    secured: SecuredListener
    mtls: MutualTlsListener | None = None
    """None when the devstack has no client certificate (openssl missing)."""
    oauth: OAuthListener | None = None
    """None when the devstack has no token key (openssl missing)."""


def cluster_id() -> str:
    """Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _template(name: str) -> str:
    return resources.files("turnledger.devstack").joinpath(name).read_text()


def render_config(
    workdir: Path,
    broker_port: int,
    controller_port: int,
    secure_port: int,
    sasl_password: str,
    tls: BrokerTls,
    mtls_port: int | None = None,
    oauth_port: int | None = None,
    jwks: Path | None = None,
    extra: Sequence[ExtraListener] = (),
) -> Path:
    """`server.properties` for these ports and secrets, mode 0600 (it holds the PLAIN user's and the
    keystore's passwords), and Kafka's log4j2 configuration. With `mtls_port`, the SSL listener that
    requires a client certificate is there too; with `oauth_port` and `jwks`, the OAUTHBEARER one;
    and each of `extra` after them."""
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "server.properties"
    bearer_port = oauth_port if jwks else None
    listeners = listener_ports(broker_port, controller_port, secure_port, mtls_port, bearer_port)
    listeners |= {listener.name: listener.port for listener in extra}
    protocols = LISTENER_PROTOCOLS | {listener.name: listener.protocol for listener in extra}
    text = Template(_template("server.properties")).substitute(
        listeners=",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
        protocol_map=",".join(f"{name}:{protocols[name]}" for name in listeners),
        mtls_settings="\n".join(mtls_settings(tls) if mtls_port is not None else []),
        oauth_settings="\n".join(oauth_settings(tls, jwks) if bearer_port is not None and jwks else []),
        extra_settings="\n".join(line for listener in extra for line in listener.settings),
        controller_port=controller_port,
        sasl_mechanisms=",".join(SASL_MECHANISMS),
        sasl_username=SASL_USERNAME,
        sasl_password=sasl_password,
        keystore=tls.keystore,
        keystore_password=tls.password,
        log_dirs=workdir / "data",
    )
    props.unlink(missing_ok=True)
    write_private(props, text)
    (workdir / "log4j2.properties").write_text(_template("log4j2.properties"))
    return props


LISTENER_PROTOCOLS = {
    "PLAINTEXT": "PLAINTEXT",
    "CONTROLLER": "PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
    "SSL": "SSL",
    "OAUTH": "SASL_SSL",
}
"""Each listener's security protocol (`listener.security.protocol.map`): the controller's and the
inter-broker traffic stay PLAINTEXT on a single loopback node."""


def listener_ports(
    broker_port: int,
    controller_port: int,
    secure_port: int,
    mtls_port: int | None,
    oauth_port: int | None = None,
) -> dict[str, int]:
    """The listeners by name, in the order they are configured; SSL and OAUTH only with their ports."""
    ports = {"PLAINTEXT": broker_port, "CONTROLLER": controller_port, "SASL_SSL": secure_port}
    optional = {"SSL": mtls_port, "OAUTH": oauth_port}
    return {**ports, **{name: port for name, port in optional.items() if port is not None}}


def oauth_settings(tls: BrokerTls, jwks: Path) -> list[str]:
    """The OAUTH listener's lines (docs/security.html, "Using SASL/OAUTHBEARER", KIP-768): OAUTHBEARER
    only, tokens validated by Kafka's `OAuthBearerValidatorCallbackHandler` against the devstack's
    JWKS file, issuer and audience; the broker's keystore for its TLS. The JWKS, issuer and audience
    settings are the broker's own (`sasl.oauthbearer.*`), which only this listener's validator reads.
    `connections.max.reauth.ms` (KIP-368) makes a connection's session end with its token, as managed
    clusters do: without it (the default, 0) a connection outlives its token for ever, and a client
    that never reconnects with a fresh one would pass every test here."""
    prefix = "listener.name.oauth."
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
    return [
        f"{prefix}sasl.enabled.mechanisms=OAUTHBEARER",
        f"{prefix}oauthbearer.sasl.jaas.config="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        f"{prefix}oauthbearer.sasl.server.callback.handler.class={handler}",
        f"{prefix}oauthbearer.connections.max.reauth.ms={OAUTH_REAUTH_MS}",
        f"sasl.oauthbearer.jwks.endpoint.url={jwks.as_uri()}",
        f"sasl.oauthbearer.expected.issuer={ISSUER}",
        f"sasl.oauthbearer.expected.audience={AUDIENCE}",
        f"{prefix}ssl.keystore.type=PKCS12",
        f"{prefix}ssl.keystore.location={tls.keystore}",
        f"{prefix}ssl.keystore.password={tls.password}",
        f"{prefix}ssl.key.password={tls.password}",
    ]


def mtls_settings(tls: BrokerTls) -> list[str]:
    """The SSL listener's lines, all prefixed with its name (docs/configuration.html: a listener's own
    SSL settings are `listener.name.{listenerName}.ssl.*`; `ssl.client.auth` is
    BrokerSecurityConfigs.SSL_CLIENT_AUTH_CONFIG): the broker's keystore, a client certificate
    required, and the devstack's CA, the one PEM file that signs the clients it trusts, as its
    truststore (DefaultSslEngineFactory takes a PEM file without a password)."""
    prefix = "listener.name.ssl."
    return [
        f"{prefix}ssl.client.auth=required",
        f"{prefix}ssl.keystore.type=PKCS12",
        f"{prefix}ssl.keystore.location={tls.keystore}",
        f"{prefix}ssl.keystore.password={tls.password}",
        f"{prefix}ssl.key.password={tls.password}",
        f"{prefix}ssl.truststore.type=PEM",
        f"{prefix}ssl.truststore.location={tls.ca_file}",
    ]


BROKER_TUNING = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""A dev broker lives minutes on a small shared box: there, C2's compiling and G1's concurrent marking
took as much CPU as the broker's requests (bench/history.md, session 21: 18 of 37 s in a throughput
run). C1 only and the serial collector halve its CPU; its GC pauses stayed under 50 ms. A production
broker is tuned by whoever runs it; `TURNLEDGER_KAFKA_JVM_OPTS` takes other flags, a collector too."""
TOOL_TUNING = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""The one-shot StorageTool only needs to start fast: C1-only + serial GC halves its run time on 2 cores."""


def jvm_args(java: str, jars: KafkaJars, workdir: Path, heap: str, tuning: tuple[str, ...]) -> list[str]:
    extra = os.environ.get("TURNLEDGER_KAFKA_JVM_OPTS", "").split()
    return [
        java,
        "-Xms128m",
        f"-Xmx{heap}",
        *tuning_with(tuning, extra),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={workdir / 'logs'}",
        "-cp",
        jars.classpath,
    ]


def tuning_with(tuning: tuple[str, ...], extra: list[str]) -> list[str]:
    """`tuning` then the user's `extra` flags, where a later flag wins; but the JVM refuses to start
    when two flags select a garbage collector ("Multiple garbage collectors selected"), so a
    collector chosen in `extra` replaces the one chosen in `tuning`."""
    if any(_selects_collector(flag) for flag in extra):
        tuning = tuple(flag for flag in tuning if not _selects_collector(flag))
    return [*tuning, *extra]


COLLECTOR_FLAGS = frozenset(
    f"-XX:+Use{name}GC" for name in ("Serial", "Parallel", "G1", "Z", "Shenandoah", "Epsilon")
)
"""The HotSpot flags that each select a garbage collector: at most one may be given."""


def _selects_collector(flag: str) -> bool:
    return flag in COLLECTOR_FLAGS


def _pick_ports(
    broker_port: int | None,
    controller_port: int | None,
    secure_port: int | None = None,
    mtls_port: int | None = None,
    oauth_port: int | None = None,
) -> tuple[int, int, int, int, int]:
    """The broker's, the controller's, the SASL_SSL, the SSL (mutual TLS) and the OAUTH listener's
    ports: the given ones when they are free (else PortInUse), the others free ones distinct from them
    and from each other. The SSL and OAUTH ports are picked even when those listeners are left out: a
    port is cheap, and a restart with openssl installed meanwhile finds them."""
    wanted = {
        "the Kafka broker listener": broker_port,
        "the KRaft controller": controller_port,
        "the Kafka SASL_SSL listener": secure_port,
        "the Kafka SSL (mutual TLS) listener": mtls_port,
        "the Kafka OAUTHBEARER listener": oauth_port,
    }
    for what, port in wanted.items():
        if port is not None and not port_is_free(port):
            raise PortInUse(what, port)
    fixed = {port for port in wanted.values() if port is not None}
    picked: list[int] = []
    for port in wanted.values():
        if port is None:
            port = free_port()
            while port in fixed or port in picked:
                port = free_port()
        picked.append(port)
    broker, controller, secure, mtls, oauth_port = picked
    return broker, controller, secure, mtls, oauth_port


def scram_arguments(username: str, password: str) -> list[str]:
    """StorageTool `format` options that add the user's SCRAM credentials to the KRaft metadata
    (KIP-900; the syntax is the tool's help text). The password is in the tool's argument list while it
    runs, a second or so, as Kafka offers no other way before the broker is up."""
    return [
        arg
        for mechanism in SCRAM_MECHANISMS
        for arg in ("--add-scram", f"{mechanism}=[name={username},password={password}]")
    ]


def format_storage(base: list[str], props: Path, log: Path, extra: list[str] | None = None) -> None:
    with open(log, "ab") as out:
        rc = subprocess.run(
            [
                *base,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id(),
                "-c",
                str(props),
                "--standalone",
                "--ignore-formatted",
                *(extra or []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    if rc != 0:
        raise DevstackError(
            f"Formatting Kafka storage failed (kafka.tools.StorageTool exit {rc}); log: {log}\n"
            f"--- last lines of {log} ---\n{procs.tail(log)}"
        )


async def _probe(bootstrap: str) -> None:
    await create_topic(bootstrap, READY_TOPIC, exist_ok=True)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=READY_TOPIC, request_timeout_ms=10000
    )
    await producer.start()
    try:
        async with producer.transaction():
            meta = await producer.send_and_wait(READY_TOPIC, b"ready")
            await producer.send_offsets_to_transaction(
                {TopicPartition(READY_TOPIC, meta.partition): meta.offset + 1}, READY_TOPIC
            )
    finally:
        await producer.stop()


async def _probe_secured(listener: SecuredListener) -> None:
    """Log in with SCRAM-SHA-512 over TLS as a turnledger client does (its settings from the variables
    `dev up` prints) and produce a record there. SCRAM credentials reach the broker with its metadata,
    a moment after its port opens; a login refused meanwhile comes back as a KafkaAccessError from
    `diagnose` (aiokafka says only "unable to bootstrap"), which is the reason shown if it persists."""
    security = KafkaSecurity.from_env(listener.client_env(READY_MECHANISM))
    await _produce_once(listener.bootstrap, security, b"ready over SASL_SSL")


async def _probe_mtls(listener: MutualTlsListener) -> None:
    """Present the devstack's client certificate on the SSL listener, with a client built from the
    variables `dev up` prints, and produce a record there. A certificate the broker refuses comes
    back as a KafkaAccessError from `diagnose` that says so, not only "unable to bootstrap"."""
    security = KafkaSecurity.from_env(listener.client_env())
    await _produce_once(listener.bootstrap, security, b"ready over mutual TLS")


async def _probe_oauth(listener: OAuthListener) -> None:
    """Log in with `dev up`'s token on the OAUTH listener, with a client built from the variables
    `dev up` prints, and produce a record there. A token the broker refuses comes back as a
    KafkaAccessError from `diagnose`."""
    security = KafkaSecurity.from_env(listener.client_env())
    await _produce_once(listener.bootstrap, security, b"ready over OAUTHBEARER")


async def _produce_once(bootstrap: str, security: KafkaSecurity, value: bytes) -> None:
    """Produce `value` to the ready topic with a client of these settings; when it cannot start,
    `diagnose` names a refusal (a login, a certificate) before the connection error is raised."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=10000, **security.client_options()
    )
    try:
        await producer.start()
    except KafkaConnectionError:
        await connection.diagnose(bootstrap, security)
        raise
    try:
        await producer.send_and_wait(READY_TOPIC, value)
    finally:
        await producer.stop()


def probe_ready(
    bootstrap: str,
    timeout_s: float,
    secured: SecuredListener | None = None,
    mtls: MutualTlsListener | None = None,
    oauth_listener: OAuthListener | None = None,
) -> None:
    """Raise unless a topic can be created and a transactional producer can initialise and commit,
    and then unless a SCRAM-SHA-512 login over TLS works on the SASL_SSL listener (with `secured`)
    and a client certificate is taken on the SSL listener (with `mtls`), the two side by side.

    The committed transaction also carries a group offset, which makes the broker create
    `__consumer_offsets` and `__transaction_state` now rather than during the first test."""

    async def probe() -> None:
        await _probe(bootstrap)
        secured_probes = [
            *([_probe_secured(secured)] if secured is not None else []),
            *([_probe_mtls(mtls)] if mtls is not None else []),
            *([_probe_oauth(oauth_listener)] if oauth_listener is not None else []),
        ]
        await asyncio.gather(*secured_probes)

    run_sync(asyncio.wait_for(probe(), timeout=timeout_s))


def _wait_ready(proc: KafkaProcess, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    reason = "the listener never accepted a TCP connection"
    while time.monotonic() < deadline:
        if not procs.is_alive(proc.pid):
            log_text = procs.tail(proc.log, 200)
            if "Address already in use" in log_text:
                raise PortInUse("the Kafka broker, one of its secured listeners or the controller", port)
            raise ServiceNotReady("Kafka", timeout_s, proc.log, procs.tail(proc.log), "the JVM exited")
        if tcp_open("127.0.0.1", port):
            try:
                left = max(1.0, min(30.0, deadline - time.monotonic()))
                probe_ready(proc.bootstrap, left, proc.secured, proc.mtls, proc.oauth)
                return
            except Exception as exc:
                reason = f"last readiness probe failed: {type(exc).__name__}: {exc}"
        time.sleep(0.25)
    raise ServiceNotReady("Kafka", timeout_s, proc.log, procs.tail(proc.log), reason)


def start_kafka(
    jars: KafkaJars,
    workdir: Path,
    pidfile: Path,
    heap: str = "512m",
    timeout_s: float = 120.0,
    broker_port: int | None = None,
    controller_port: int | None = None,
    secure_port: int | None = None,
    tls_dir: Path | None = None,
    mtls_port: int | None = None,
    oauth_port: int | None = None,
    extra_listeners: Sequence[ExtraListener] = (),
) -> KafkaProcess:
    """Format (idempotently) and start the broker detached; return once it is ready or raise.

    `tls_dir` holds the secured listeners' certificates (default: `tls/` beside `workdir`); a
    state dir's sessions share their state dir's, made once (devstack/tls.py). The SSL listener is
    there when that material has a client certificate, the OAUTH listener when openssl made the
    token key. `extra_listeners` are there too, but readiness is not probed on them: their logins
    are their tests' business."""
    for listener in extra_listeners:
        if not port_is_free(listener.port):
            raise PortInUse(f"the Kafka {listener.name} listener", listener.port)
    java = require_java()
    broker, controller, secure, mutual, bearer = _pick_ports(
        broker_port, controller_port, secure_port, mtls_port, oauth_port
    )
    formatted = (workdir / "data" / "meta.properties").exists()  # a restart keeps its cluster id
    password_file = workdir / SASL_PASSWORD_FILE
    if formatted and not password_file.exists():
        raise DevstackError(
            f"{workdir / 'data'} was formatted with SCRAM credentials whose password file "
            f"{password_file} is gone, so nobody could log in to the SASL_SSL listener. "
            "Run `turnledger dev down` (it deletes the broker's data) and start again."
        )
    tls_dir = tls_dir or workdir.parent / "tls"
    tls = ensure_broker_tls(tls_dir)
    password = stored_password(password_file)
    mtls = _mtls_listener(mutual, tls.ca_file, tls.client)
    bearer_listener = _oauth_listener(workdir, tls_dir, bearer, tls.ca_file)
    jwks = workdir / OAUTH_JWKS_FILE if bearer_listener else None
    props = render_config(
        workdir,
        broker,
        controller,
        secure,
        password,
        tls,
        mutual if mtls else None,
        bearer,
        jwks,
        extra_listeners,
    )
    log = workdir / "kafka.log"
    if not formatted:
        tool = jvm_args(java, jars, workdir, heap, TOOL_TUNING)
        format_storage(tool, props, log, scram_arguments(SASL_USERNAME, password))
    allowed = [f"-D{ALLOWED_URLS_PROPERTY}={jwks.as_uri()}"] if jwks else []
    allowed += [option for listener in extra_listeners for option in listener.jvm_options]
    broker_argv = [*jvm_args(java, jars, workdir, heap, BROKER_TUNING), *allowed, "kafka.Kafka", str(props)]
    pid = procs.spawn_detached(broker_argv, log, pidfile, cwd=workdir)
    secured = SecuredListener(f"127.0.0.1:{secure}", SASL_USERNAME, password_file, tls.ca_file)
    proc = KafkaProcess(
        pid, f"127.0.0.1:{broker}", log, str(props), jars.version, secured, mtls, bearer_listener
    )
    try:
        _wait_ready(proc, broker, timeout_s)
    except BaseException:
        procs.stop_pidfile(pidfile, proc.marker, grace_s=5)
        raise
    return proc


def _mtls_listener(port: int, ca_file: Path, client: ClientTls | None) -> MutualTlsListener | None:
    """The SSL listener on `port` when there is a client certificate to present there."""
    if client is None:
        return None
    return MutualTlsListener(f"127.0.0.1:{port}", ca_file, client.cert_file, client.key_file)


def _oauth_listener(workdir: Path, tls_dir: Path, port: int, ca_file: Path) -> OAuthListener | None:
    """The OAUTH listener on `port` when openssl can make the token key: the key (once per state
    dir), its JWKS for the broker and a fresh week-long token for `dev up`'s clients (mode 0600)."""
    tool = openssl()
    if tool is None:
        return None
    key: SigningKey = ensure_signing_key(tls_dir, tool)
    workdir.mkdir(parents=True, exist_ok=True)
    key.write_jwks(workdir / OAUTH_JWKS_FILE)
    token_file = workdir / OAUTH_TOKEN_FILE
    token_file.unlink(missing_ok=True)
    write_private(token_file, key.mint(OAUTH_SUBJECT, OAUTH_TOKEN_LIFETIME_S) + "\n")
    return OAuthListener(f"127.0.0.1:{port}", ca_file, token_file, key.path)
