"""The spec's test list as ingress event streams, one conversation per case.

Each case drives the pure fold through `tests.unit.dispatch.scenario.Conversation`
(so the events it appends, such as HandleBound with the manifest digest, are exactly
what a worker would append) and records the events. The integration tests send the
same events through Kafka and compare the processor's outputs with the pure fold's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.unit.dispatch.scenario import Conversation, text_stream, tool_stream
from turnledger.model.events import IngressEvent, StreamOutcome, SubmittedBlock, TurnSubmitted

ARGS_PARIS = '{"city": "Paris"}'
ARGS_ROME = '{"city": "Rome"}'


class GlobalOps(Conversation):
    """Operation ids made unique across conversations (`<conversation>/<op>`), as they are in
    production: the projection and `replay manifest` key operations by id alone. The cases keep
    writing `c.request("op-2")`; events, state and lookups all use the global id."""

    def global_op(self, op: str) -> str:
        prefix = f"{self.conversation_id}/"
        return op if op.startswith(prefix) else prefix + op

    def apply(self, event: IngressEvent) -> list:  # type: ignore[type-arg]
        op = getattr(event, "operation_id", None)
        if op is not None:
            event = event.model_copy(update={"operation_id": self.global_op(op)})
        return super().apply(event)

    def manifest_digest(self, op: str = "op-1") -> str:
        return super().manifest_digest(self.global_op(op))

    def dispatch_to_streaming(self, op: str = "op-1", handle: str = "msg_1") -> None:
        self.request(op)
        self.attempt(op)
        gen = self.state.operations[self.global_op(op)].attempt_generation
        self.sent(op, gen)
        self.bind(op, gen, handle)


def _recording(conversation_id: str, global_ops: bool = False) -> tuple[Conversation, list[IngressEvent]]:
    events: list[IngressEvent] = []
    c = GlobalOps(conversation_id) if global_ops else Conversation(conversation_id=conversation_id)
    rewrite = c.global_op if isinstance(c, GlobalOps) else None
    apply = c.apply

    def record(event: IngressEvent) -> list:  # type: ignore[type-arg]
        op = getattr(event, "operation_id", None)
        if rewrite is not None and op is not None:
            event = event.model_copy(update={"operation_id": rewrite(op)})
        events.append(event)
        return apply(event)

    c.apply = record  # type: ignore[method-assign]
    return c, events


def orphaned_result(c: Conversation) -> None:
    c.user("weather?")
    c.tool_results(("call-x", "get_weather", ARGS_PARIS))
    c.request()


def two_results_for_one_call(c: Conversation) -> None:
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", [ARGS_PARIS])]))
    c.tool_results(("call-1", "get_weather", ARGS_PARIS), ("call-1", "get_weather", ARGS_PARIS))
    c.tool_results(("call-1", "get_weather", ARGS_PARIS))
    c.tool_results(("call-1", "get_weather", ARGS_PARIS))
    c.request("op-2")


def reordered_parallel_calls(c: Conversation) -> None:
    c.user("Paris and Rome?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", [ARGS_PARIS]), ("call-2", "get_weather", [ARGS_ROME])]))
    c.request("op-2")
    c.tool_results(("call-2", "get_weather", ARGS_ROME))
    c.tool_results(("call-1", "get_weather", ARGS_PARIS))


def truncated_arguments(cut: int) -> Callable[[Conversation], None]:
    def case(c: Conversation) -> None:
        c.user("weather?")
        c.dispatch_to_streaming()
        c.deltas(tool_stream([("call-1", "get_weather", [ARGS_PARIS[:cut]])]))

    return case


def duplicated_deltas(c: Conversation) -> None:
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["one ", "two ", "three"])
    c.deltas(stream[:4] + stream[2:4])
    c.deltas(stream[3:] + stream[3:])


def missing_stop(c: Conversation) -> None:
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["partial"], stop=False))
    c.ended(StreamOutcome.COMPLETED)


def handle_bound_to_wrong_manifest(c: Conversation) -> None:
    c.user("hello")
    c.request()
    c.attempt()
    c.sent()
    c.bind(digest="sha256:" + "f" * 64)
    c.deltas(text_stream(["never"]))


def old_stream_after_new(c: Conversation) -> None:
    c.user("hello")
    c.dispatch_to_streaming()
    old = text_stream(["old ", "text"], handle="msg_1", gen=1)
    c.deltas(old[:3])
    c.ended(StreamOutcome.DISCONNECTED)
    c.terminated()
    c.attempt()
    c.sent(gen=2)
    c.bind(gen=2, handle="msg_2")
    c.deltas(old[3:], gen=1)
    c.deltas(text_stream(["new"], handle="msg_2", gen=2), gen=2)


def adapter_upgrade(c: Conversation) -> None:
    c.user("hello")
    c.request("op-legacy", adapter="anthropic-messages@0")
    c.request("op-current", adapter="anthropic-messages@1")


def rollback_to_legacy_adapter(c: Conversation) -> None:
    """The spec's rollback rule: anthropic-messages@0 predates scoped inputs, so a history with a
    retrieved_snippet pauses it (no manifest, no flattening); @1 renders the same graph."""
    c.user("what does the doc say?")
    c.apply(
        TurnSubmitted(
            conversation_id=c.conversation_id,
            event_id="snippet",
            occurred_at_ms=900,
            turn_id="s1",
            blocks=(
                SubmittedBlock(
                    id="s1-b0",
                    role="user",
                    kind="retrieved_snippet",
                    trust_label="retrieved",
                    text="Rome in May: average high 23C.",
                ),
            ),
        )
    )
    c.request("op-legacy", adapter="anthropic-messages@0")
    c.request("op-current", adapter="anthropic-messages@1")


def recovery_and_resume(c: Conversation) -> None:
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["a", "b", "c"])
    c.deltas(stream[:4])
    c.recovered()
    c.resume()
    c.deltas(stream[2:])


def multi_turn_tools(c: Conversation) -> None:
    c.user("Paris?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city"', ': "Paris"}'])]))
    c.request("op-2")
    c.tool_results(("call-1", "get_weather", ARGS_PARIS))
    c.attempt("op-2")
    c.sent("op-2")
    c.bind("op-2", handle="msg_2")
    c.deltas(text_stream(["It is sunny."], handle="msg_2"), op="op-2")


CASES: dict[str, Callable[[Conversation], None]] = {
    "orphaned": orphaned_result,
    "two-results": two_results_for_one_call,
    "reordered": reordered_parallel_calls,
    "duplicated-deltas": duplicated_deltas,
    "missing-stop": missing_stop,
    "wrong-manifest": handle_bound_to_wrong_manifest,
    "old-after-new": old_stream_after_new,
    "adapter-upgrade": adapter_upgrade,
    "rollback": rollback_to_legacy_adapter,
    "resume": recovery_and_resume,
    "multi-turn": multi_turn_tools,
    **{f"truncated-{cut}": truncated_arguments(cut) for cut in range(len(ARGS_PARIS))},
}


@dataclass(frozen=True)
class Workload:
    events: list[IngressEvent]
    conversations: dict[str, Conversation]


def build(copies: int = 1, *, global_ops: bool = False) -> Workload:
    """Every case, `copies` times, interleaved round-robin so conversations share batches.

    `global_ops`: operation ids `<conversation>/<op>` (see GlobalOps), for projections and replay."""
    streams: list[list[IngressEvent]] = []
    conversations: dict[str, Conversation] = {}
    for copy in range(copies):
        for name, case in CASES.items():
            conversation_id = f"{name}#{copy}"
            c, events = _recording(conversation_id, global_ops)
            case(c)
            streams.append(events)
            conversations[conversation_id] = c
    interleaved: list[IngressEvent] = []
    for i in range(max(len(s) for s in streams)):
        interleaved.extend(s[i] for s in streams if i < len(s))
    return Workload(interleaved, conversations)
