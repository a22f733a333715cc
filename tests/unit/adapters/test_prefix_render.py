"""A render continued from the conversation's last render (adapters/prefix.py) gives the same bytes.

Every prefix of generated conversations is rendered in order with one cache, then the whole
conversation after every prefix; each must equal the render from nothing, which must equal the
canonical JSON of `build` (what the goldens pin). The conversations put system text, whitespace
text, unsigned thinking, scoped input and late results at the cut points, where a continued
render could merge, drop or move what it should not.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.adapters.conversations import Conversation, long_history, params_for, sequence_of
from tests.unit.adapters.strategies import content, conversations
from turnledger.adapters import skeleton
from turnledger.adapters.base import Adapter, DispatchParams, Rendered, RenderOutcome, UnsupportedKind
from turnledger.adapters.prefix import RenderCache
from turnledger.adapters.registry import ADAPTERS
from turnledger.adapters.skeleton import AdapterBase
from turnledger.model.graph import Block, MessageSequence, Role

ADAPTER_IDS = sorted(ADAPTERS)


def _prefix(sequence: MessageSequence, m: int) -> MessageSequence:
    return sequence_of(sequence.conversation_id, sequence.blocks[:m], revision=m)


def _fresh(adapter: Adapter, sequence: MessageSequence, params: DispatchParams) -> RenderOutcome:
    outcome = adapter.render(sequence, params)
    if not isinstance(outcome, UnsupportedKind):
        payload = adapter.build(sequence, params)
        assert not isinstance(payload, UnsupportedKind)
        assert outcome == Rendered.of(payload)
    return outcome


def check_every_cut(sequence: MessageSequence, params_of: dict[str, DispatchParams]) -> None:
    n = len(sequence.blocks)
    for adapter in ADAPTERS.values():
        params = params_of[adapter.provider]
        fresh = [_fresh(adapter, _prefix(sequence, m), params) for m in range(n + 1)]
        chained = RenderCache()
        for m in range(n + 1):
            assert adapter.render(_prefix(sequence, m), params, chained) == fresh[m], (adapter, m)
        for m in range(n):
            cache = RenderCache()
            adapter.render(_prefix(sequence, m), params, cache)
            assert adapter.render(sequence, params, cache) == fresh[n], (adapter, m)


@st.composite
def long_conversations(draw: st.DrawFn) -> MessageSequence:
    """Steps in any order, valid or not at every cut: the render must not care."""
    c = Conversation("cuts")
    pending: list[Block] = []
    for _ in range(draw(st.integers(2, 12))):
        step = draw(
            st.sampled_from(
                ("user", "user", "blank", "system", "snippet", "assistant", "thinking", "calls", "results")
            )
        )
        c.next_turn()
        if step == "user":
            c.user(draw(content))
        elif step == "blank":
            c.user(" ")  # some APIs leave whitespace text out: a run with no parts
        elif step == "system":
            c.system(draw(content))
        elif step == "snippet":
            c.snippet(draw(content), role=draw(st.sampled_from((Role.USER, Role.TOOL))))
        elif step == "assistant":
            c.assistant(draw(content))
        elif step == "thinking":
            signed = draw(st.booleans())
            c.thinking(draw(content), signature="c2ln" if signed else None, block_id=f"rs_{c.turn}")
        elif step == "calls":
            pending += [c.call("search_docs", {"q": draw(content)}) for _ in range(draw(st.integers(1, 2)))]
        elif pending:
            for call in draw(st.permutations(pending)):
                status = draw(st.sampled_from(("success", "error", "cancel")))
                c.result(
                    call, draw(content), status=status, role=draw(st.sampled_from((Role.TOOL, Role.USER)))
                )
            pending = []
    return c.build()


PARAMS = {p: params_for(p) for p in ("openai", "anthropic", "google", "bedrock")}
NO_TOOLS = {p: params_for(p, tools=()) for p in PARAMS}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_valid_conversations_render_the_same_from_any_prefix(sequence: MessageSequence) -> None:
    check_every_cut(sequence, PARAMS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_conversations(), st.booleans())
def test_any_block_order_renders_the_same_from_any_prefix(sequence: MessageSequence, tools: bool) -> None:
    check_every_cut(sequence, PARAMS if tools else NO_TOOLS)


def test_an_assistant_turn_after_a_blank_user_run_is_not_merged_across_the_cut() -> None:
    """Anthropic leaves whitespace text out, so `A | U(" ") A` merges both assistant runs: no reuse."""
    c = Conversation("blank")
    c.next_turn().user("hi")
    c.next_turn().assistant("one")
    c.next_turn().user(" ")
    c.next_turn().assistant("two")
    c.next_turn().user("ok")
    check_every_cut(c.build(), PARAMS)


class _Counting(AdapterBase):  # type: ignore[type-arg]
    """The adapter, counting the blocks it renders."""

    def __init__(self, inner: AdapterBase) -> None:  # type: ignore[type-arg]
        self.__dict__.update(inner.__dict__)
        self._inner = inner
        self.api, self.provider = inner.api, inner.provider
        self.part_renderers = inner.part_renderers
        self.rendered = 0

    def body_layout(self, rules):  # type: ignore[no-untyped-def]
        return self._inner.body_layout(rules)

    def turns(self, runs, notice):  # type: ignore[no-untyped-def]
        return type(self._inner).turns(self, runs, notice)

    def tool_definition(self, name, description, schema):  # type: ignore[no-untyped-def]
        return self._inner.tool_definition(name, description, schema)

    def request_policy(self, earlier, new, params):  # type: ignore[no-untyped-def]
        return self._inner.request_policy(earlier, new, params)

    def render_block(self, block):  # type: ignore[no-untyped-def]
        self.rendered += 1
        return super().render_block(block)


def test_a_dispatch_late_in_a_long_conversation_renders_only_the_new_blocks() -> None:
    """1,002 blocks, the last render before the last assistant turn: only the 6 new blocks are rendered
    (the first and the last once more, to check the cut), the bytes those of a render from nothing."""
    sequence = long_history(1000)
    previous = max(
        i
        for i, b in enumerate(sequence.blocks)
        if b.role == Role.ASSISTANT and i and sequence.blocks[i - 1].role == Role.USER
    )
    assert len(sequence.blocks) - previous == 6
    for adapter_id in ADAPTER_IDS:
        adapter = ADAPTERS[adapter_id]
        assert isinstance(adapter, AdapterBase)
        counting = _Counting(adapter)
        params = params_for(adapter.provider)
        cache = RenderCache()
        counting.render(_prefix(sequence, previous), params, cache)
        counting.rendered = 0
        assert counting.render(sequence, params, cache) == adapter.render(sequence, params)
        assert counting.rendered == 6 + 2, adapter_id
        assert cache.get((adapter_id, sequence.conversation_id)) is not None


def test_another_conversation_or_a_changed_history_renders_from_nothing() -> None:
    sequence = long_history(40)
    adapter = ADAPTERS["anthropic-messages@2"]
    params = params_for("anthropic")
    cache = RenderCache()
    adapter.render(sequence, params, cache)
    edited = replace_block_text(sequence, 5, "edited")
    assert adapter.render(edited, params, cache) == adapter.render(edited, params)
    other = sequence.model_copy(update={"conversation_id": "other"})
    assert adapter.render(other, params, cache) == adapter.render(other, params)
    assert len(cache) == 2


def replace_block_text(sequence: MessageSequence, index: int, text: str) -> MessageSequence:
    blocks = list(sequence.blocks)
    blocks[index] = blocks[index].model_copy(update={"text": text}).with_digest()
    return sequence_of(sequence.conversation_id, blocks, revision=sequence.conversation_revision)


def test_the_cache_is_bounded_in_bytes() -> None:
    adapter = ADAPTERS["openai-chat@2"]
    params = params_for("openai")
    sizing = RenderCache()
    adapter.render(long_history(60), params, sizing)
    entry = sizing.held_bytes  # every conversation below renders to the same size
    cache = RenderCache(max_bytes=2 * entry + entry // 2)
    for i in range(5):
        adapter.render(long_history(60).model_copy(update={"conversation_id": f"c{i}"}), params, cache)
    assert (len(cache), cache.held_bytes) == (2, 2 * entry)
    assert [cache.get(("openai-chat@2", f"c{i}")) is not None for i in range(5)] == [False] * 3 + [True] * 2
    too_small = RenderCache(max_bytes=entry - 1)
    adapter.render(long_history(60), params, too_small)
    assert (len(too_small), too_small.held_bytes) == (0, 0)


def test_changed_params_with_the_same_history_still_render_their_own_bytes() -> None:
    sequence = long_history(30)
    for adapter in ADAPTERS.values():
        params = params_for(adapter.provider)
        cache = RenderCache()
        adapter.render(sequence, params, cache)
        other = replace(params, max_output_tokens=7, tools=())
        assert adapter.render(sequence, other, cache) == adapter.render(sequence, other)


def test_the_cache_is_bounded_in_entries_too() -> None:
    """`max_entries`: the most recent entries kept however few bytes each holds."""
    adapter = ADAPTERS["openai-chat@2"]
    params = params_for("openai")
    cache = RenderCache(max_entries=2)
    for i in range(5):
        adapter.render(long_history(10).model_copy(update={"conversation_id": f"c{i}"}), params, cache)
    assert len(cache) == 2
    assert [cache.get(("openai-chat@2", f"c{i}")) is not None for i in range(5)] == [False] * 3 + [True] * 2
    unbounded = RenderCache()
    for i in range(5):
        adapter.render(long_history(10).model_copy(update={"conversation_id": f"c{i}"}), params, unbounded)
    assert len(unbounded) == 5
    assert unbounded.held_bytes == 5 * cache.held_bytes // 2


class _CountingSha256:
    """`hashlib` as the skeleton sees it, counting the bytes each fresh SHA-256 starts from."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def sha256(self, data: bytes = b"") -> Any:
        self.started.append(len(data))
        return hashlib.sha256(data)


def test_a_continued_render_hashes_on_from_the_saved_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest of a continued render is the prefix's saved SHA-256 state updated with the new bytes
    only: no hash starts from the first byte again (the bytes and digest equal a fresh render's)."""
    sequence = long_history(200)
    cut = len(sequence.blocks) - 6
    for adapter_id in ADAPTER_IDS:
        adapter = ADAPTERS[adapter_id]
        params = _without_root_thinking(params_for(adapter.provider))
        counting = _CountingSha256()
        monkeypatch.setattr(skeleton, "hashlib", counting)
        cache = RenderCache()
        adapter.render(_prefix(sequence, cut), params, cache)
        saved = cache.get((adapter_id, sequence.conversation_id))
        assert saved is not None and saved.hash_state is not None, adapter_id
        assert saved.hash_state.digest() == hashlib.sha256(saved.hashed).digest(), adapter_id
        assert len(counting.started) == 1, adapter_id  # the first render hashes from nothing
        continued = adapter.render(sequence, params, cache)
        assert len(counting.started) == 1, adapter_id  # the second only continues
        monkeypatch.undo()
        assert continued == adapter.render(sequence, params), adapter_id


def _without_root_thinking(params: DispatchParams) -> DispatchParams:
    """The policy without `additional_model_request_fields` (see the next test)."""
    policy = {k: v for k, v in params.policy.items() if k != "additional_model_request_fields"}
    return replace(params, policy=policy)


def test_a_continued_render_whose_head_changed_hashes_from_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """bedrock-converse@2 puts `additionalModelRequestFields` at the body's root, before `messages`: the
    prefix asked to think, the continuation is in a tool loop that did not open with thinking, so the
    head before the turns differs and the digest is computed afresh, the bytes a fresh render's."""
    sequence = long_history(200)
    adapter = ADAPTERS["bedrock-converse@2"]
    params = params_for("bedrock")
    counting = _CountingSha256()
    monkeypatch.setattr(skeleton, "hashlib", counting)
    cache = RenderCache()
    first = adapter.render(_prefix(sequence, len(sequence.blocks) - 6), params, cache)
    continued = adapter.render(sequence, params, cache)
    monkeypatch.undo()
    assert len(counting.started) == 2
    assert isinstance(first, Rendered) and isinstance(continued, Rendered)
    field = b"additionalModelRequestFields"
    assert field in first.body and field not in continued.body
    assert continued == adapter.render(sequence, params)


def test_the_same_history_rendered_again_continues_from_its_whole_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dispatch with the same history (a retry, other params) renders no block again and hashes on
    from the saved state: the prefix covering every block is reused, not thrown away."""
    sequence = long_history(60)
    for adapter_id in ADAPTER_IDS:
        adapter = ADAPTERS[adapter_id]
        assert isinstance(adapter, AdapterBase)
        params = params_for(adapter.provider)
        counting_blocks = _Counting(adapter)
        counting = _CountingSha256()
        monkeypatch.setattr(skeleton, "hashlib", counting)
        cache = RenderCache()
        first = counting_blocks.render(sequence, params, cache)
        counting_blocks.rendered = 0
        again = counting_blocks.render(sequence, params, cache)
        assert (counting_blocks.rendered, len(counting.started)) == (0, 1), adapter_id
        monkeypatch.undo()
        assert again == first == adapter.render(sequence, params), adapter_id


def test_only_layouts_with_stub_tools_keep_the_tool_names_of_the_history() -> None:
    """The tool names a prefix keeps serve the stub tools of a later render without offered tools; an
    API that declares none keeps none (the cache holds what a render needs, not more)."""
    c = Conversation("names")
    c.next_turn().user("look it up")
    calls = [c.call("search_docs", {"q": "a"}), c.call("fetch_page", {"url": "b"}), c.call("search_docs", {})]
    c.next_turn()
    for call in calls:
        c.result(call, "found")
    c.next_turn().user("thanks")
    sequence = c.build()
    kept = {}
    for adapter_id in ADAPTER_IDS:
        adapter = ADAPTERS[adapter_id]
        assert isinstance(adapter, AdapterBase)
        cache = RenderCache()
        adapter.render(sequence, params_for(adapter.provider, tools=()), cache)
        saved = cache.get((adapter_id, sequence.conversation_id))
        assert saved is not None
        kept[adapter_id] = (adapter.layout.stub_tools, saved.tool_names)
    assert {names for stub, names in kept.values() if stub} == {("search_docs", "fetch_page")}
    assert {names for stub, names in kept.values() if not stub} == {()}
    assert any(stub for stub, _ in kept.values()) and not all(stub for stub, _ in kept.values())


def _renders_in_steps(sequence: MessageSequence, cuts: tuple[int, ...], params: DispatchParams) -> None:
    """Every adapter renders the sequence cut by cut with one cache: each render is a render from nothing."""
    for adapter_id in ADAPTER_IDS:
        adapter = ADAPTERS[adapter_id]
        cache = RenderCache()
        for cut in (*cuts, len(sequence.blocks)):
            part = _prefix(sequence, cut)
            assert adapter.render(part, params, cache) == _fresh(adapter, part, params), (adapter_id, cut)


def test_a_continued_render_keeps_the_tool_names_of_its_prefix_and_adds_the_new_ones() -> None:
    """Stub tools (no tools offered) name every tool the history used, the prefix's first."""
    c = Conversation("names-grow")
    c.next_turn().user("Weather?")
    c.next_turn().assistant("Checking.")
    w = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(w, "4")
    cut = len(c.blocks)
    c.next_turn().assistant("Searching.")
    s = c.call("search_docs", {"query": "oslo"})
    c.next_turn().result(s, "none")
    c.next_turn().assistant("Done.")
    c.next_turn().user("Thanks.")
    _renders_in_steps(c.build(), (cut,), NO_TOOLS["anthropic"])


def test_a_call_the_last_continued_render_added_still_stops_the_next_from_continuing() -> None:
    """The call ids a continued render adds are kept: a result of that call among the next new blocks
    is placed back inside the prefix, so that render starts from nothing."""
    c = Conversation("ids-grow")
    c.next_turn().user("Weather?")
    first = len(c.blocks)
    c.next_turn().assistant("Checking.")
    w = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().user("Still there?")
    second = len(c.blocks)
    c.next_turn().assistant("Yes.")
    c.next_turn().result(w, "4")
    _renders_in_steps(c.build(), (first, second), PARAMS["anthropic"])
