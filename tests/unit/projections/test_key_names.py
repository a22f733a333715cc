"""Which keys a projection names (`keys.is_key_under`, `WHOLE_NAMES`, `KINDS`): every key each
`ProjectionKeys` method makes is under its base whatever the prefix and the ids, and under no other
projection's base that does not start it; names that only resemble a projection's are not; a projection
under a longer prefix (`tl:v2:`) is not taken for part of one under `tl:`; and the two tables hold exactly
the names the methods make, found by asking the class for its methods, so that a key method the tables
miss fails here."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.errors import ProjectionError
from turnledger.projections.keys import KINDS, WHOLE_NAMES, ProjectionKeys, is_key_under

NOT_KEYS = frozenset({"of", "beside", "group_of", "split", "prefix", "one_slot", "shards", "base", "groups"})
"""Public members of `ProjectionKeys` that make no key: every other one is asked for its key below."""
LISTED = (
    "offsets",
    "stats",
    "rejections",
    "conversations",
    "layout",
    "events",
    "conversation",
    "history",
    "history_order",
    "operations",
    "operation",
    "operation_conversations",
    "quarantine",
    "previews",
)
ARGUMENTS = ("conversation_id", "operation_id")
"""The parameters a key method may take."""


def _key_members() -> dict[str, bool]:
    """Every key member of `ProjectionKeys`, and whether it takes ids (a method) or not (a property)."""
    out: dict[str, bool] = {}
    for name, member in vars(ProjectionKeys).items():
        if not name.isidentifier() or not name.isascii() or name.startswith("_") or name in NOT_KEYS:
            continue  # mutmut's trampolines add members named `xǁProjectionKeysǁ...`
        if isinstance(member, property):
            out[name] = False
        elif inspect.isfunction(member):
            taken = [p for p in inspect.signature(member).parameters if p != "self"]
            assert taken and set(taken) <= set(ARGUMENTS), f"ProjectionKeys.{name}{taken}: a key method?"
            out[name] = True
    return out


KEY_MEMBERS = _key_members()

SPLIT = ProjectionKeys("tl:", one_slot=True, shards=3)
CASES = {
    "tl:": ProjectionKeys("tl:"),
    "tl:v2:": ProjectionKeys("tl:v2:"),
    "a*b:": ProjectionKeys("a*b:"),
    "{tl:}": ProjectionKeys("tl:", one_slot=True),
    "split in 3": SPLIT,
    **{f"group {g.base}": g for g in SPLIT.groups},
}
OTHER_BASES = (
    "tl:",
    "tm:",
    "tl:v2:",
    "tl:v3:",
    "t:",
    "l:",
    "a*b:",
    "a*c:",
    "{tl:}",
    "{tm:}",
    "{tl:v2:}",
    "{a*b:}",
    "verify:tl:",
    *(g.base for g in SPLIT.groups),
    "{tl:#3}",
    "{tl:#}",
)
"""Bases of other projections (and slot groups), several as long as the ones under test."""
IDS = st.text(alphabet=st.sampled_from("ab1-:%{}#*?[]\\ é"), max_size=10) | st.text(max_size=10)
"""Conversation and operation ids: any text, often with what the keys give a meaning to (`:`, `%`)."""
EXAMPLE_IDS = ("c-1", "a:b", "50%", "%3A", "x:%:y", ":", "%", "")
PROPERTY = settings(max_examples=150, deadline=None)


def made(keys: ProjectionKeys, member: str, conversation: str, operation: str) -> str:
    """The key `member` of `keys` makes (for these ids, if it takes them)."""
    if not KEY_MEMBERS[member]:
        key: str = getattr(keys, member)
        return key
    method: Callable[..., str] = getattr(keys, member)
    given_ids = {"conversation_id": conversation, "operation_id": operation}
    return method(**{p: given_ids[p] for p in inspect.signature(method).parameters})


def placed(keys: ProjectionKeys, conversation: str, operation: str) -> list[tuple[str, str, str]]:
    """(member, base it must be under, key) for every key of `keys`: of a split projection, what it
    refuses (the names a slot group holds whole) is asked of each group."""
    out = []
    for member in KEY_MEMBERS:
        try:
            key = made(keys, member, conversation, operation)
        except ProjectionError:
            assert keys.split, f"{member} refused by a projection not split"
            out += [(member, g.base, made(g, member, conversation, operation)) for g in keys.groups]
            continue
        # split, a conversation's keys live in its slot group, and the layout is the projection's own
        whole = not keys.split or member == "layout"
        out.append((member, keys.base if whole else keys.group_of(conversation).base, key))
    return out


def _derived_names() -> tuple[set[str], set[str]]:
    """What the members make after the base: whole names (properties) and kinds (methods, up to the
    first `:`, the ids holding none)."""
    whole, kinds = set(), set()
    for member, base, key in placed(ProjectionKeys("tl:"), "c-1", "o-1"):
        assert key.startswith(base)
        name = key[len(base) :]
        if KEY_MEMBERS[member]:
            kind, _, rest = name.partition(":")
            assert rest in ("c-1", "o-1", "c-1:o-1"), f"{member} makes {key!r}"
            kinds.add(kind + ":")
        else:
            whole.add(name)
    return whole, kinds


DERIVED_WHOLE, DERIVED_KINDS = _derived_names()


# ------------------------------------------------------------------------------------------- tables


def test_every_listed_key_member_is_found_and_nothing_else_is_taken_for_one() -> None:
    assert set(LISTED) <= set(KEY_MEMBERS)
    assert {m for m, takes_ids in KEY_MEMBERS.items() if not takes_ids} >= {
        "offsets",
        "stats",
        "rejections",
        "conversations",
        "layout",
    }


def test_the_whole_names_are_exactly_the_ones_the_properties_make() -> None:
    assert frozenset(DERIVED_WHOLE) == WHOLE_NAMES
    assert sorted(DERIVED_WHOLE) == ["conversations", "layout", "offsets", "rejections", "stats"]


def test_the_kinds_are_exactly_the_ones_the_methods_make_each_once() -> None:
    assert isinstance(KINDS, tuple) and len(set(KINDS)) == len(KINDS)
    assert set(KINDS) == DERIVED_KINDS
    assert len(DERIVED_KINDS) == 9 and all(kind.endswith(":") for kind in KINDS)


def test_a_split_projection_refuses_the_names_each_group_holds_whole() -> None:
    refused = []
    for member in KEY_MEMBERS:
        try:
            made(SPLIT, member, "c-1", "o-1")
        except ProjectionError:
            refused.append(member)
    assert sorted(refused) == ["conversations", "offsets", "operation_conversations", "rejections", "stats"]
    assert {base for _, base, _ in placed(SPLIT, "c-1", "o-1")} == {
        "{tl:}",
        *(g.base for g in SPLIT.groups),
    }


# ------------------------------------------------------------------------------- keys a projection makes


@pytest.mark.parametrize("keys", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("conversation", EXAMPLE_IDS)
def test_every_key_is_under_its_base(keys: ProjectionKeys, conversation: str) -> None:
    every = placed(keys, conversation, "o:1%")
    assert len(every) >= len(LISTED)
    for member, base, key in every:
        assert is_key_under(base, key), (member, base, key)


@PROPERTY
@given(conversation=IDS, operation=IDS)
def test_every_key_is_under_its_base_whatever_the_ids(conversation: str, operation: str) -> None:
    for keys in CASES.values():
        for member, base, key in placed(keys, conversation, operation):
            assert is_key_under(base, key), (member, base, key)


@PROPERTY
@given(conversation=IDS, operation=IDS)
def test_no_key_is_under_another_base_that_does_not_start_it(conversation: str, operation: str) -> None:
    for keys in CASES.values():
        for member, _, key in placed(keys, conversation, operation):
            for other in OTHER_BASES:
                if not key.startswith(other):
                    assert not is_key_under(other, key), (member, other, key)


@PROPERTY
@given(conversation=IDS, operation=IDS, at=st.integers(0, 20), character=st.characters())
def test_no_key_is_under_a_base_as_long_as_its_own_that_differs_by_one_character(
    conversation: str, operation: str, at: int, character: str
) -> None:
    """What follows the other base is then a name a projection makes: only the base tells them apart."""
    for keys in CASES.values():
        for member, base, key in placed(keys, conversation, operation):
            i = at % len(base)
            if base[i] != character:
                other = base[:i] + character + base[i + 1 :]
                assert not is_key_under(other, key), (member, other, key)


# ------------------------------------------------------------------------------ names that only resemble


NEAR_MISSES = sorted(
    {
        "",
        ":",
        "history",
        "historyc-1",
        "history-c-1",
        "opx:1",
        "offsets2",
        "HISTORY:c-1",
        "Stats",
        " stats",
        "other-app:x",
        "v2:stats",
        "v2:history:c-1",
        *(kind[:-1] for kind in DERIVED_KINDS),
        *(kind[:-1] + "x:1" for kind in DERIVED_KINDS),
        *(kind[:-1] + "c-1" for kind in DERIVED_KINDS),
        *(name + suffix for name in DERIVED_WHOLE for suffix in ("2", ":", ":x", "-old", "s", " ")),
        *(name[:-1] for name in DERIVED_WHOLE),
    }
)


@pytest.mark.parametrize("base", ["tl:", "{tl:}", "{tl:#1}", "a*b:"])
@pytest.mark.parametrize("name", NEAR_MISSES)
def test_a_name_that_only_resembles_a_projection_s_is_not_under_the_base(base: str, name: str) -> None:
    assert not is_key_under(base, base + name)


@PROPERTY
@given(name=st.sampled_from(sorted(DERIVED_WHOLE)), suffix=st.text(min_size=1))
def test_a_whole_name_followed_by_anything_is_not_a_key(name: str, suffix: str) -> None:
    assert not is_key_under("tl:", f"tl:{name}{suffix}")


# ---------------------------------------------------------------------- a projection under a longer prefix


@PROPERTY
@given(conversation=IDS, operation=IDS)
def test_no_key_of_a_projection_under_tl_v2_is_under_tl(conversation: str, operation: str) -> None:
    for member, base, key in placed(ProjectionKeys("tl:v2:"), conversation, operation):
        assert base == "tl:v2:" and key.startswith("tl:")
        assert not is_key_under("tl:", key), (member, key)


@PROPERTY
@given(
    more=st.text(alphabet=st.sampled_from("v2:-ophistryckn%{}#"), min_size=1, max_size=8)
    | st.text(min_size=1, max_size=8),
    conversation=IDS,
    operation=IDS,
)
def test_no_key_of_a_projection_under_a_longer_prefix_is_under_the_shorter(
    more: str, conversation: str, operation: str
) -> None:
    """Unless what lengthens the prefix starts with a kind (`tl:op:` beside `tl:`), which the module
    docstring says cannot be told apart."""
    if more.startswith(tuple(DERIVED_KINDS)):
        return
    for member, _, key in placed(ProjectionKeys("tl:" + more), conversation, operation):
        assert not is_key_under("tl:", key), (member, key)
