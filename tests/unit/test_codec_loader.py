"""Reading the `.avsc` contracts (`codec/loader.py`): every file keyed by its type's full name, and
`expand` inlining each referenced named type once, at its first occurrence."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from turnledger.codec import loader
from turnledger.codec.loader import Schema, expand, full_name, load_schema_files

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
NS = "turnledger.v1"

COLOUR = {"type": "enum", "name": "Colour", "namespace": "ns", "symbols": ["RED", "BLUE"]}
DIGEST = {"type": "fixed", "name": "Digest", "namespace": "ns", "size": 4}


def record(name: str, **fields: Any) -> Schema:
    return {
        "type": "record",
        "name": name,
        "namespace": "ns",
        "fields": [{"name": k, "type": v} for k, v in fields.items()],
    }


def with_field_types(schema: Schema, **types: Any) -> Schema:
    return {**schema, "fields": [{**f, "type": types.get(f["name"], f["type"])} for f in schema["fields"]]}


@pytest.mark.parametrize(
    ("schema", "name"),
    [
        ({"name": "Colour", "namespace": "ns"}, "ns.Colour"),
        ({"name": "other.Colour", "namespace": "ns"}, "other.Colour"),
        ({"name": "Colour"}, "Colour"),
        ({"name": "Colour", "namespace": ""}, "Colour"),
        ({"name": "Colour", "namespace": None}, "Colour"),
    ],
)
def test_the_full_name_joins_the_namespace_unless_the_name_is_already_dotted(
    schema: Schema, name: str
) -> None:
    assert full_name(schema) == name


def test_every_schema_file_is_loaded_in_file_name_order_keyed_by_its_full_name() -> None:
    paths = sorted(SCHEMA_DIR.glob("*.avsc"))
    expected = [(f"{NS}.{p.stem}", json.loads(p.read_text(encoding="utf-8"))) for p in paths]
    assert len(expected) > 30
    assert list(load_schema_files().items()) == expected


def test_only_avsc_files_are_loaded_and_the_history_folder_is_skipped() -> None:
    assert (SCHEMA_DIR / "history").is_dir()
    assert all(name.startswith(f"{NS}.") and "@" not in name for name in load_schema_files())


class _File:
    """A packaged file as `importlib.resources` hands it out: not orderable, read as text."""

    def __init__(self, name: str, schema: Schema | None = None) -> None:
        self.name = name
        self.text = json.dumps(schema)
        self.encodings: list[str] = []

    def read_text(self, encoding: str) -> str:
        self.encodings.append(encoding)
        return self.text


class _Package:
    def __init__(self, *entries: _File) -> None:
        self.entries = entries
        self.asked: list[str] = []

    def joinpath(self, name: str) -> _Package:
        self.asked.append(name)
        return self

    def iterdir(self) -> list[_File]:
        return list(self.entries)


def test_packaged_files_are_read_as_utf8_in_name_order_whatever_the_listing_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zebra = _File("Zebra.avsc", {"type": "enum", "name": "Zebra", "namespace": "ns", "symbols": ["Ä"]})
    apple = _File("Apple.avsc", {"type": "fixed", "name": "x.Apple", "size": 1})
    package = _Package(zebra, _File("README.md"), apple)
    opened: list[str] = []
    monkeypatch.setattr(loader, "files", lambda name: opened.append(name) or package)
    assert list(load_schema_files().items()) == [
        ("x.Apple", {"type": "fixed", "name": "x.Apple", "size": 1}),
        ("ns.Zebra", {"type": "enum", "name": "Zebra", "namespace": "ns", "symbols": ["Ä"]}),
    ]
    assert (opened, package.asked) == (["turnledger"], ["_schemas"])
    assert (zebra.encodings, apple.encodings) == (["utf-8"], ["utf-8"])


def test_primitives_unions_and_unknown_names_are_kept_as_they_are() -> None:
    definitions = {"ns.R": record("R", a="string", b=["null", "long"], c="ns.Elsewhere")}
    assert expand("ns.R", definitions) == definitions["ns.R"]


def test_a_named_type_is_inlined_at_its_first_reference_and_named_after_it() -> None:
    definitions = {"ns.R": record("R", first="ns.Colour", second=["null", "ns.Colour"]), "ns.Colour": COLOUR}
    assert expand("ns.R", definitions) == record("R", first=COLOUR, second=["null", "ns.Colour"])


def test_a_fixed_type_is_inlined_once_too() -> None:
    definitions = {"ns.R": record("R", a="ns.Digest", b="ns.Digest"), "ns.Digest": DIGEST}
    assert expand("ns.R", definitions) == record("R", a=DIGEST, b="ns.Digest")


def test_a_nested_record_is_expanded_and_its_references_count_for_the_rest() -> None:
    inner = record("Inner", colour="ns.Colour")
    definitions = {
        "ns.Outer": record("Outer", inner="ns.Inner", colour="ns.Colour", again="ns.Inner"),
        "ns.Inner": inner,
        "ns.Colour": COLOUR,
    }
    assert expand("ns.Outer", definitions) == record(
        "Outer", inner=record("Inner", colour=COLOUR), colour="ns.Colour", again="ns.Inner"
    )


def test_a_recursive_record_refers_to_itself_by_name() -> None:
    definitions = {"ns.Node": record("Node", value="long", next=["null", "ns.Node"])}
    assert expand("ns.Node", definitions) == definitions["ns.Node"]


def test_array_items_and_map_values_are_expanded() -> None:
    definitions = {
        "ns.R": record(
            "R",
            colours={"type": "array", "items": "ns.Colour"},
            digests={"type": "map", "values": "ns.Digest"},
        ),
        "ns.Colour": COLOUR,
        "ns.Digest": DIGEST,
    }
    assert expand("ns.R", definitions) == record(
        "R", colours={"type": "array", "items": COLOUR}, digests={"type": "map", "values": DIGEST}
    )


def test_a_type_wrapped_in_an_object_is_expanded_and_keeps_its_attributes() -> None:
    definitions = {
        "ns.R": record(
            "R",
            colour={"type": "ns.Colour", "doc": "wrapped"},
            at={"type": "long", "logicalType": "timestamp-millis"},
        ),
        "ns.Colour": COLOUR,
    }
    assert expand("ns.R", definitions) == record(
        "R",
        colour={"type": COLOUR, "doc": "wrapped"},
        at={"type": "long", "logicalType": "timestamp-millis"},
    )


def test_expanding_leaves_the_definitions_as_they_were() -> None:
    definitions = {
        "ns.R": record("R", colour="ns.Colour", colours={"type": "array", "items": "ns.Colour"}),
        "ns.Colour": COLOUR,
    }
    before = copy.deepcopy(definitions)
    first = expand("ns.R", definitions)
    assert definitions == before
    assert first == record("R", colour=COLOUR, colours={"type": "array", "items": "ns.Colour"})
    assert expand("ns.R", definitions) == first


def test_changing_an_expansion_changes_neither_the_definitions_nor_the_next_expansion() -> None:
    """Every list and dict of the expansion is its own: an inlined enum's symbols, a field's default, a
    record's aliases and a wrapped type's attributes were the definitions' own objects."""
    outer = record("R", colour="ns.Colour", tags={"type": "array", "items": "string"}, at="long")
    outer["aliases"] = ["ns.Old"]
    outer["fields"][1]["default"] = ["a"]
    outer["fields"][2] = {"name": "at", "type": {"type": "long", "props": {"unit": "ms"}}}
    definitions = {"ns.R": outer, "ns.Colour": copy.deepcopy(COLOUR)}
    before = copy.deepcopy(definitions)
    first = expand("ns.R", definitions)
    expected = copy.deepcopy(first)
    first["fields"][0]["type"]["symbols"].append("GREEN")
    first["fields"][1]["default"].append("b")
    first["fields"][2]["type"]["props"]["unit"] = "s"
    first["aliases"].clear()
    assert definitions == before
    assert expand("ns.R", definitions) == expected
    assert expected["fields"][0]["type"]["symbols"] == ["RED", "BLUE"]


def test_an_enum_of_the_real_contracts_is_inlined_where_a_record_uses_it() -> None:
    files = load_schema_files()
    assert expand(f"{NS}.PreviewRetracted", files) == with_field_types(
        files[f"{NS}.PreviewRetracted"], reason=files[f"{NS}.ReasonCode"]
    )


def test_the_real_dispatch_decision_inlines_its_state_once() -> None:
    files = load_schema_files()
    assert expand(f"{NS}.DispatchDecision", files) == with_field_types(
        files[f"{NS}.DispatchDecision"],
        state=files[f"{NS}.DispatchState"],
        previousState=["null", f"{NS}.DispatchState"],
        reason=["null", files[f"{NS}.ReasonCode"]],
    )


def test_the_real_manifest_record_inlines_the_manifest_and_its_block_refs() -> None:
    files = load_schema_files()
    manifest = with_field_types(
        files[f"{NS}.DispatchManifest"], blocks={"type": "array", "items": files[f"{NS}.BlockRef"]}
    )
    assert expand(f"{NS}.ManifestIssued", files) == with_field_types(
        files[f"{NS}.ManifestIssued"], manifest=manifest
    )
