"""A secret read from a variable or from a file it names: never in a repr, a log line or an error."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from turnledger.errors import KafkaSettingsError


class Secret:
    """Only the client that logs in reads the value (`reveal`); its repr names the kind, not the value."""

    __slots__ = ("_kind", "_value")

    def __init__(self, value: str, kind: str = "Secret") -> None:
        self._value = value
        self._kind = kind

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"{self._kind}('***')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and (other._kind, other._value) == (self._kind, self._value)

    def __hash__(self) -> int:
        return hash((self._kind, self._value))


def read_secret(env: Mapping[str, str], name: str, file_name: str, kind: str) -> Secret | None:
    """The secret in `name`, or in the file `file_name` names (stripped: a mounted secret often ends in
    a newline); None when neither is set. Both set, a file that cannot be read, that is not UTF-8 or
    that is empty: a KafkaSettingsError naming the variable."""
    value, path = env.get(name, ""), env.get(file_name, "").strip()
    if value and path:
        raise KafkaSettingsError(f"set {name} or {file_name}, not both")
    if path:
        value = read_text(file_name, Path(path))
        if not value:
            raise KafkaSettingsError(f"{file_name}: {path} is empty")
    return Secret(value, kind) if value else None


def read_text(variable: str, path: Path) -> str:
    """The stripped UTF-8 text of the file `variable` names, or a KafkaSettingsError saying why not."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise KafkaSettingsError(f"{variable}: cannot read {path} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise KafkaSettingsError(f"{variable}: {path} is not UTF-8") from None
