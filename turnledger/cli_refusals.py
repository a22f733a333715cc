"""The refusals: the errors every command ends with in one line, `turnledger: MESSAGE`, exit 2, no traceback.

A setting that cannot work (Kafka's or Redis's variables, a size limit, a model registry override, a
devstack variable), Kafka or Redis refusing our login or TLS, a metrics port that cannot be listened on:
waiting cannot mend any of them, and each message names what to fix. `turnledger.cli.main` says them for
every command. A child of `process --processes N` runs outside that entry point; it reports a refusal to
its parent by this same table (`processors/multiproc.py`), and the parent raises it again as a
`ChildRefusedError`, which is in the table too: N processes end with the line and status of one.
"""

from __future__ import annotations

from turnledger.adapters.admission import ModelRegistryError
from turnledger.errors import (
    DevstackSettingsError,
    KafkaAccessError,
    KafkaSettingsError,
    MetricsServeError,
    RedisAccessError,
    RedisSettingsError,
    TurnledgerError,
)
from turnledger.processors.errors import ChildRefusedError
from turnledger.processors.limits_config import LimitsConfigError

EXIT_REFUSED = 2

REFUSALS: tuple[type[TurnledgerError], ...] = (
    ChildRefusedError,
    DevstackSettingsError,
    KafkaAccessError,
    KafkaSettingsError,
    LimitsConfigError,
    MetricsServeError,
    ModelRegistryError,
    RedisAccessError,
    RedisSettingsError,
)
"""Each with its subclasses (`SessionTimeoutRefusedError` is a `KafkaSettingsError`, ...)."""


def refusal_line(refusal: BaseException) -> str:
    """The one line a command ends with for `refusal`."""
    return f"turnledger: {refusal}"
