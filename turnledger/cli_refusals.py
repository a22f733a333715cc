"""The refusals: the errors a command ends with in one line, `SPEAKER: MESSAGE`, exit 2, no traceback.

Every command (`REFUSALS`, said by `turnledger.cli.main` as `turnledger: MESSAGE`): a setting that cannot
work (Kafka's or Redis's variables, a size limit, a model registry override, a devstack variable), Kafka
or Redis refusing our login or TLS, a metrics port that cannot be listened on. Waiting cannot mend any
of them, and each message names what to fix.

`turnledger process` also ends in one line of its own (`PROCESS_REFUSALS`, `turnledger process:
MESSAGE`) when Kafka stayed unreachable for longer than --max-outage or a topic does not fit.

A child of `process --processes N` runs outside both; it reports what it met by `PROCESS_ENDINGS`
(`processors/multiproc.py`), and when every child that failed met the same class, the parent raises
a `ChildRefusedError` that `process` says in that class's line: N processes end with the line and
status of one.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnledger.adapters.admission import ModelRegistryError
from turnledger.errors import (
    DevstackSettingsError,
    KafkaAccessError,
    KafkaSettingsError,
    KafkaUnavailableError,
    MetricsServeError,
    RedisAccessError,
    RedisSettingsError,
    TurnledgerError,
)
from turnledger.processors.errors import TopicMismatchError
from turnledger.processors.limits_config import LimitsConfigError

EXIT_REFUSED = 2


@dataclass(frozen=True, slots=True)
class Refusals:
    """Errors said in one line, `SPEAKER: MESSAGE`, with exit 2: each of `families` with its subclasses
    (`SessionTimeoutRefusedError` is a `KafkaSettingsError`, ...)."""

    speaker: str
    families: tuple[type[TurnledgerError], ...]

    def line(self, refusal: object) -> str:
        """The one line a command ends with for `refusal`."""
        return f"{self.speaker}: {refusal}"


REFUSALS = Refusals(
    "turnledger",
    (
        DevstackSettingsError,
        KafkaAccessError,
        KafkaSettingsError,
        LimitsConfigError,
        MetricsServeError,
        ModelRegistryError,
        RedisAccessError,
        RedisSettingsError,
    ),
)
"""Said by the entry point, for every command."""

PROCESS_REFUSALS = Refusals("turnledger process", (KafkaUnavailableError, TopicMismatchError))
"""Said by `turnledger process` itself: Kafka unreachable for longer than --max-outage, a topic that does
not fit."""

PROCESS_ENDINGS = (REFUSALS, PROCESS_REFUSALS)
"""What `turnledger process` says in one line with exit 2, by whom."""


def refusals_of(error: BaseException) -> Refusals | None:
    """The class of `PROCESS_ENDINGS` that `error` belongs to, if any."""
    return next((refusals for refusals in PROCESS_ENDINGS if isinstance(error, refusals.families)), None)
