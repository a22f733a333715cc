"""Fetch the Kafka broker jars from Maven Central once, through the pinned pom, and cache them.

A cache entry is `<cache_root>/kafka-<version>/libs` plus a `.complete` marker written only after Maven
succeeded, so an interrupted download is redone rather than half-used.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from turnledger.devstack.errors import JavaMissing, JavaTooOld, MavenDownloadFailed, MavenMissing
from turnledger.devstack.procs import tail
from turnledger.devstack.settings import LOG4J2_FOR_KAFKA, Settings

MARKER = ".complete"


@dataclass(frozen=True)
class KafkaJars:
    version: str
    libs: Path

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def pom_text() -> str:
    return resources.files("turnledger.devstack").joinpath("pom.xml").read_text()


def java_major(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise JavaMissing()
    major = java_major(java)
    if major and major < 17:
        raise JavaTooOld(major)
    return java


def cached(settings: Settings) -> KafkaJars | None:
    for version in settings.kafka_versions:
        entry = settings.kafka_cache(version)
        if (entry / MARKER).exists():
            return KafkaJars(version, entry / "libs")
    return None


def _fetch(version: str, entry: Path, mvn: str) -> bool:
    entry.mkdir(parents=True, exist_ok=True)
    pom = entry / "pom.xml"
    pom.write_text(pom_text())
    staging = entry / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log = entry / "mvn.log"
    with open(log, "wb") as out:
        rc = subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-Dkafka.version={version}",
                f"-Dlog4j2.version={LOG4J2_FOR_KAFKA.get(version, '2.25.5')}",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    core = staging / f"kafka_2.13-{version}.jar"
    if rc != 0 or not core.exists():
        shutil.rmtree(staging, ignore_errors=True)
        return False
    libs = entry / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    (entry / MARKER).write_text(version + "\n")
    return True


def ensure_jars(settings: Settings) -> KafkaJars:
    """Cached jars for the first usable version, downloading (with fallback) when none is cached."""
    hit = cached(settings)
    if hit is not None:
        return hit
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenMissing()
    tried: list[str] = []
    for version in settings.kafka_versions:
        tried.append(version)
        entry = settings.kafka_cache(version)
        if _fetch(version, entry, mvn):
            return KafkaJars(version, entry / "libs")
    last_log = settings.kafka_cache(tried[-1]) / "mvn.log"
    raise MavenDownloadFailed(tried, last_log, tail(last_log))
