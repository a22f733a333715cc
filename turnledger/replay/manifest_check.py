"""`replay manifest`: rebuild a manifest's request from the topics and prove it is the same.

The sequence is rebuilt from `turnledger.committed` only (the canonical history, up to
the manifest's revision), the dispatch parameters from the operation's
DispatchRequested on the ingress topic, and the request is rendered again with the
adapter the manifest names. Every binding of the manifest is then checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from turnledger.adapters.base import DispatchParams, Rendered, UnsupportedKind
from turnledger.adapters.registry import get_adapter
from turnledger.codec import CodecError, decode
from turnledger.kafka.reading import (
    NamedProgress,
    ReadProgress,
    partitions_of,
    read_to_end,
    start_reader,
    told_as,
)
from turnledger.model.canonical import sha256_digest
from turnledger.model.events import CommittedTurn, DispatchRequested, ManifestIssued
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.manifest import DispatchManifest
from turnledger.sequence.builder import append, sequence_of
from turnledger.sequence.graph_state import GraphState
from turnledger.sequence.validation import Invalid, Waiting
from turnledger.topology import Topics

TopicProgress = NamedProgress
"""`(topic, done, total)`: the `ReadProgress` of each topic read in turn."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    recorded: str
    rebuilt: str

    @property
    def ok(self) -> bool:
        return self.recorded == self.rebuilt


@dataclass
class ManifestCheck:
    operation_id: str
    manifest_digest: str
    adapter: str
    conversation_revision: int
    checks: list[Check] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


def check_manifest(
    manifest: DispatchManifest,
    turns: Sequence[CommittedTurn],
    request: DispatchRequested | None,
    limits: Limits = DEFAULT_LIMITS,
) -> ManifestCheck:
    """Pure: re-derive every binding of `manifest` from committed turns and its dispatch request
    (the turns validated again under `limits`: the processor's, or a committed turn may not re-apply)."""
    result = ManifestCheck(
        manifest.operation_id, manifest.manifest_digest, manifest.adapter, manifest.conversation_revision
    )
    result.checks.append(
        Check("manifest digest (seal)", manifest.manifest_digest, manifest.sealed().manifest_digest)
    )
    if request is None:
        result.error = f"no DispatchRequested for operation {manifest.operation_id} on the ingress topic"
        return result
    state = GraphState.empty(manifest.conversation_id)
    for turn in sorted(turns, key=lambda t: t.revision):
        if turn.revision > manifest.conversation_revision:
            break
        advanced = append(state, turn.blocks, limits)
        if isinstance(advanced, Invalid):
            codes = ", ".join(sorted(code.value for code in advanced.codes))
            result.error = f"committed revision {turn.revision} does not validate: {codes}"
            return result
        state = advanced
    outcome = sequence_of(state)
    if isinstance(outcome, Waiting):
        result.error = f"the rebuilt sequence is WAITING on {list(outcome.pending_call_ids)}"
        return result
    sequence = outcome.sequence
    result.checks.append(
        Check("conversation revision", str(manifest.conversation_revision), str(state.revision))
    )
    result.checks.append(Check("sequence digest", manifest.sequence_digest, sequence.sequence_digest))
    result.checks.append(Check("block refs", _refs(manifest.blocks), _refs(sequence.block_refs())))
    adapter = get_adapter(manifest.adapter)
    result.checks.append(Check("adapter digest", manifest.adapter_digest, adapter.digest))
    params = DispatchParams.of_request(request)
    rendered = adapter.render(sequence, params)
    if isinstance(rendered, UnsupportedKind):
        result.error = f"{manifest.adapter} now refuses kind {rendered.kind!r} (block {rendered.block_id})"
        return result
    assert isinstance(rendered, Rendered)
    result.checks.append(Check("request bytes", manifest.request_body, rendered.body.decode("utf-8")))
    result.checks.append(Check("request digest", manifest.request_digest, rendered.request_digest))
    result.checks.append(
        Check("request digest = sha256(request bytes)", manifest.request_digest, sha256_digest(rendered.body))
    )
    return result


def _refs(refs: Sequence[object]) -> str:
    return "\n".join(repr(r) for r in refs)


@dataclass
class TopicEvidence:
    manifests: list[DispatchManifest] = field(default_factory=list)
    turns: dict[str, list[CommittedTurn]] = field(default_factory=dict)
    requests: dict[tuple[str, str], DispatchRequested] = field(default_factory=dict)
    """(conversation, operation) -> its DispatchRequested: operation ids are unique per conversation only."""


async def gather(
    bootstrap: str,
    topics: Topics,
    operation_id: str | None = None,
    digest: str | None = None,
    progress: TopicProgress | None = None,
) -> TopicEvidence:
    """Read the manifests, committed and ingress topics once and keep what the check needs."""
    evidence = TopicEvidence()
    consumer = await start_reader(bootstrap)
    try:
        # manifests first: they say which conversations and operations the other topics must give
        for topic in (topics.manifests, topics.committed, topics.ingress):
            partitions = await partitions_of(consumer, bootstrap, [topic])
            conversations = {m.conversation_id for m in evidence.manifests}
            operations = {(m.conversation_id, m.operation_id) for m in evidence.manifests}
            async for batch in read_to_end(consumer, partitions, progress=told_as(progress, topic)):
                for r in batch:
                    _collect(evidence, r.value, operation_id, digest, conversations, operations)
    finally:
        await consumer.stop()
    return evidence


def _collect(
    evidence: TopicEvidence,
    value: bytes | None,
    operation_id: str | None,
    digest: str | None,
    conversations: set[str],
    operations: set[tuple[str, str]],
) -> None:
    if value is None:
        return
    try:
        record = decode(value)
    except CodecError:
        return  # undecodable records are `replay audit`'s business
    if isinstance(record, ManifestIssued):
        m = record.manifest
        if (operation_id is None or m.operation_id == operation_id) and (
            digest is None or m.manifest_digest == digest
        ):
            evidence.manifests.append(m)
    elif isinstance(record, CommittedTurn) and record.conversation_id in conversations:
        evidence.turns.setdefault(record.conversation_id, []).append(record)
    elif isinstance(record, DispatchRequested):
        key = (record.conversation_id, record.operation_id)
        if key in operations:
            evidence.requests.setdefault(key, record)


async def reproduce(
    bootstrap: str,
    topics: Topics,
    operation_id: str | None = None,
    digest: str | None = None,
    progress: TopicProgress | None = None,
) -> list[ManifestCheck]:
    """One check per matching manifest (an operation re-prepared after WAITING has several); `progress`
    follows the reading of the topics (`gather`)."""
    if operation_id is None and digest is None:
        raise ValueError("give an operation id or a manifest digest")
    from turnledger.processors.limits_config import load_limits  # as the processor: TURNLEDGER_MAX_*

    evidence = await gather(bootstrap, topics, operation_id, digest, progress)
    limits = load_limits()
    return [
        check_manifest(
            m,
            evidence.turns.get(m.conversation_id, []),
            evidence.requests.get((m.conversation_id, m.operation_id)),
            limits,
        )
        for m in evidence.manifests
    ]


async def latest_manifests(
    bootstrap: str, topics: Topics, operation_ids: set[str], progress: ReadProgress | None = None
) -> dict[tuple[str, str], DispatchManifest]:
    """The last manifest issued for each operation of `operation_ids`, keyed by (conversation, operation):
    the same operation id may exist in several conversations (what shadow diff compares against)."""
    evidence = TopicEvidence()
    consumer = await start_reader(bootstrap)
    try:
        partitions = await partitions_of(consumer, bootstrap, [topics.manifests])
        async for batch in read_to_end(consumer, partitions, progress=progress):
            for r in batch:
                _collect(evidence, r.value, None, None, set(), set())
    finally:
        await consumer.stop()
    return {
        (m.conversation_id, m.operation_id): m for m in evidence.manifests if m.operation_id in operation_ids
    }
