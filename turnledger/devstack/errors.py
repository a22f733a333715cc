"""Typed devstack failures.

Each error says what was tried and what to do next, because the person reading it is usually looking at
a red CI log or a terminal with no other context.
"""

from __future__ import annotations

from pathlib import Path

from turnledger.errors import DevstackError

__all__ = [
    "DevstackError",
    "DockerUnavailable",
    "JavaMissing",
    "JavaTooOld",
    "KeytoolMissing",
    "MavenDownloadFailed",
    "MavenMissing",
    "PortInUse",
    "RedisServerMissing",
    "ServiceNotReady",
]


class JavaMissing(DevstackError):
    def __init__(self) -> None:
        super().__init__(
            "Java was not found on PATH (tried `java -version`). The Kafka 4.x broker needs Java 17+. "
            "Install it (Debian/Ubuntu: `apt-get install -y openjdk-17-jre-headless`), or point "
            "KAFKA_BOOTSTRAP_SERVERS at an existing broker."
        )


class JavaTooOld(DevstackError):
    def __init__(self, found: int) -> None:
        super().__init__(
            f"Java {found} was found, but the Kafka 4.x broker needs Java 17+. Install a newer JDK/JRE "
            "and put it first on PATH, or point KAFKA_BOOTSTRAP_SERVERS at an existing broker."
        )


class KeytoolMissing(DevstackError):
    def __init__(self) -> None:
        super().__init__(
            "keytool was not found on PATH (it comes with Java); the devstack makes the certificates of "
            "the broker's SASL_SSL listener with it. Install a full Java runtime (Debian/Ubuntu: "
            "`apt-get install -y openjdk-17-jre-headless`), or point KAFKA_BOOTSTRAP_SERVERS at a broker."
        )


class MavenMissing(DevstackError):
    def __init__(self) -> None:
        super().__init__(
            "Maven was not found on PATH (tried `mvn -v`); it is needed once to fetch the Kafka broker jars "
            "from Maven Central. Install it (Debian/Ubuntu: `apt-get install -y maven`), or set "
            "KAFKA_BOOTSTRAP_SERVERS to an existing broker, or run with Docker available."
        )


class MavenDownloadFailed(DevstackError):
    def __init__(self, versions: list[str], log: Path, tail: str) -> None:
        self.log = log
        super().__init__(
            f"Fetching the Kafka broker jars from Maven Central failed for version(s) {', '.join(versions)} "
            f"(ran `mvn -B -q dependency:copy-dependencies`; full output in {log}). Check network access to "
            "https://repo.maven.apache.org (or your ~/.m2/settings.xml mirror) and retry.\n"
            f"--- last lines of {log} ---\n{tail}"
        )


class RedisServerMissing(DevstackError):
    def __init__(self) -> None:
        super().__init__(
            "redis-server was not found on PATH. Install it (`apt-get install -y redis-server`; `make test` "
            "does this when run as root), or set REDIS_URL to an existing Redis."
        )


class PrometheusMissing(DevstackError):
    def __init__(self) -> None:
        super().__init__(
            "prometheus is not installed. Install Debian's package (`apt-get install -y "
            "--no-install-recommends prometheus`; `make` does it when run as root)."
        )


class PortInUse(DevstackError):
    def __init__(self, what: str, port: int) -> None:
        self.port = port
        super().__init__(
            f"Port {port} on 127.0.0.1 (wanted for {what}) is already in use. Stop whatever listens there "
            "(`ss -ltnp | grep :%d`), or leave the port unset so a free one is chosen." % port
        )


class ServiceNotReady(DevstackError):
    def __init__(self, what: str, seconds: float, log: Path, tail: str, reason: str) -> None:
        self.log = log
        super().__init__(
            f"{what} did not become ready within {seconds:.0f}s ({reason}). Its log is {log}; "
            f"the process has been stopped.\n--- last lines of {log} ---\n{tail}"
        )


class DockerUnavailable(DevstackError):
    def __init__(self, detail: str) -> None:
        super().__init__(
            f"The Docker backend was requested (TURNLEDGER_DEVSTACK_BACKEND=docker) but Docker does not "
            f"answer: {detail}. Start the Docker daemon or use TURNLEDGER_DEVSTACK_BACKEND=local."
        )
