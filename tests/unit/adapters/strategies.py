"""Hypothesis strategy for valid conversations (our own; no dependency on the validator).

Valid: every call gets exactly one terminal result after it; results may arrive in
any order and a user block may be committed between calls and results; scoped input
blocks in user and tool roles; signed and unsigned thinking; content drawn from
injection strings and arbitrary text.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.unit.adapters.conversations import INJECTIONS, Conversation
from turnledger.model.graph import MessageSequence, Role

TOOL_NAMES = ("get_weather", "search_docs", "send_email")

content = st.one_of(
    st.sampled_from(INJECTIONS),
    st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != ""),
)
argument_values = st.one_of(st.integers(-5, 5), st.text(max_size=10), st.booleans(), st.none())


@st.composite
def conversations(draw: st.DrawFn) -> MessageSequence:
    c = Conversation("hyp")
    if draw(st.booleans()):
        c.system(draw(content))
    turns = draw(st.integers(1, 4))
    for t in range(turns):
        c.next_turn()
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(("text", "text", "snippet", "artifact")))
            text = draw(content)
            {"text": c.user, "snippet": c.snippet, "artifact": c.artifact}[kind](text)
        if t == turns - 1 and draw(st.booleans()):
            break  # end on a user turn
        c.next_turn()
        if draw(st.booleans()):
            signed = draw(st.booleans())
            c.thinking(
                draw(content), signature="c2ln" if signed else None, block_id=f"rs_{t}" if signed else None
            )
        n_calls = draw(st.integers(0, 3))
        if n_calls == 0 or draw(st.booleans()):
            c.assistant(draw(content))
        sign_first = draw(st.booleans())
        calls = [
            c.call(
                draw(st.sampled_from(TOOL_NAMES)),
                draw(st.dictionaries(st.sampled_from(("a", "b", "q")), argument_values, max_size=3)),
                signature="Z2Vtc2ln" if (i == 0 and sign_first) else None,
            )
            for i in range(n_calls)
        ]
        if n_calls and draw(st.booleans()):
            c.next_turn().user(draw(content))  # the user typed while the tools ran
        if calls:
            c.next_turn()
            for call in draw(st.permutations(calls)):
                status = draw(st.sampled_from(("success", "success", "error", "cancel")))
                c.result(call, draw(st.one_of(st.sampled_from(("", " ", "\n")), content)), status=status)
            if draw(st.booleans()):
                c.snippet(draw(content), role=Role.TOOL)
            if t == turns - 1:
                break
        elif t == turns - 1:
            c.next_turn().user(draw(content))
    return c.build()
