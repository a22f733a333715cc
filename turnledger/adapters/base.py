"""The adapter contract: a versioned, pure function from a validated graph to request bytes.

An adapter is `(api, version)`. Its output is canonical JSON (sorted keys, no
insignificant whitespace), so the same graph and parameters always give the same
bytes and the same `request_digest`; the manifest binds both. An adapter's `digest`
covers its api, version and rules table: two adapters with different role rules can
never share a digest, and a change of rules without a version bump is caught by the
golden tests (the digest is recorded next to the golden bytes).

An adapter that meets a block kind its rules table does not map returns
`UnsupportedKind` instead of guessing: the dispatch layer turns that into PAUSED
(the rollback rule of the spec: never degrade to string concatenation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from turnledger.errors import AdapterError
from turnledger.model.canonical import canonical_json, sha256_digest
from turnledger.model.events import DispatchRequested
from turnledger.model.graph import Block, MessageSequence, Role
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition

if TYPE_CHECKING:
    from turnledger.adapters.prefix import RenderCache

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class DispatchParams:
    """What the dispatch request adds to the graph: model, toolset, output budget, policy.

    `policy` holds neutral sampling keys (temperature, top_p, top_k, stop_sequences,
    seed, presence_penalty, frequency_penalty, parallel_tool_calls, store); each
    adapter whitelists the ones its API accepts and ignores the rest.
    """

    model_revision: str
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int = 1024
    policy: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of_request(cls, request: DispatchRequested) -> DispatchParams:
        return cls(
            model_revision=request.model_revision,
            tools=request.tools,
            max_output_tokens=request.max_output_tokens,
            policy=request.policy,
        )


@dataclass(frozen=True)
class Rendered:
    """The exact request body and its digest."""

    body: bytes
    request_digest: str

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Rendered:
        body = canonical_json(payload)
        return cls(body=body, request_digest=sha256_digest(body))


@dataclass(frozen=True)
class UnsupportedKind:
    """The adapter cannot render this block faithfully: pause, do not degrade."""

    kind: str
    block_id: str
    detail: str = ""

    @property
    def reason(self) -> ReasonCode:
        return ReasonCode.UNSUPPORTED_KIND


RenderOutcome = Rendered | UnsupportedKind


class UnknownAdapterError(AdapterError, ValueError):
    """No adapter is registered under this id."""

    reason = ReasonCode.UNKNOWN_ADAPTER

    def __init__(self, adapter_id: str) -> None:
        super().__init__(f"unknown adapter {adapter_id!r}")
        self.adapter_id = adapter_id


class MalformedSequenceError(AdapterError, ValueError):
    """The sequence breaks an assumption the validator guarantees (e.g. non-object arguments).

    Adapters are given validated sequences; this is raised, never rendered around.
    """

    reason = ReasonCode.MALFORMED_BLOCK


class InvalidModelRevisionError(AdapterError, ValueError):
    """A model revision that is not `provider/model@revision`."""

    reason = ReasonCode.UNKNOWN_MODEL


@dataclass(frozen=True)
class ModelRevision:
    provider: str
    model: str
    revision: str

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.model}"


def parse_model_revision(value: str) -> ModelRevision:
    """`provider/model@revision` → parts; the model part is what goes on the wire."""
    head, sep, revision = value.rpartition("@")
    provider, slash, model = head.partition("/")
    if not sep or not slash or not provider or not model or not revision:
        raise InvalidModelRevisionError(f"model revision {value!r} is not provider/model@revision")
    return ModelRevision(provider=provider, model=model, revision=revision)


KNOWN_ROLES = frozenset(r.value for r in Role)


def first_unsupported(blocks: Iterable[Block], renderers: Mapping[str, str]) -> UnsupportedKind | None:
    """The first block whose kind the rules table has no renderer for."""
    for block in blocks:
        if block.role not in KNOWN_ROLES:
            raise MalformedSequenceError(f"block {block.id}: unknown role {block.role!r}")
        if block.kind not in renderers:
            return UnsupportedKind(kind=block.kind, block_id=block.id, detail="no renderer in rules table")
    return None


@runtime_checkable
class Adapter(Protocol):
    adapter_id: str
    api: str
    version: int
    provider: str

    @property
    def digest(self) -> str: ...

    def build(self, sequence: MessageSequence, params: DispatchParams) -> JsonObject | UnsupportedKind: ...

    def policy_refusal(self, max_output_tokens: int, policy: Mapping[str, Any]) -> str | None: ...

    def render(
        self, sequence: MessageSequence, params: DispatchParams, cache: RenderCache | None = None
    ) -> RenderOutcome: ...


class RulesTable(Protocol):
    """What the build skeleton reads from every API's rules table; the rest is the API's own."""

    @property
    def renderers(self) -> Mapping[str, str]: ...

    @property
    def policy_fields(self) -> Mapping[str, str]: ...

    @property
    def scoped_notice(self) -> str | None: ...

    def as_data(self) -> JsonObject: ...
