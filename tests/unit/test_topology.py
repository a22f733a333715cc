"""The one table of topics (topology.py): the streams, their physical names under a prefix, which the
processor writes and the projector applies, and the settings each topic is created with."""

from __future__ import annotations

import pytest

from turnledger.topology import (
    DEFAULT_PREVIEWS_RETENTION_MS,
    OUTPUT_STREAMS,
    PROJECTED_STREAMS,
    SPEC_OF,
    TOPOLOGY,
    Stream,
    Topics,
    TopicSpec,
    topic_settings,
)


def test_every_stream_has_its_word() -> None:
    assert [s.value for s in Stream] == [
        "ingress",
        "committed",
        "manifests",
        "tool-calls",
        "previews",
        "quarantine",
        "rejections",
        "changelog",
    ]


def test_the_table_holds_every_stream_once_in_the_order_the_projector_applies_them() -> None:
    assert [spec.stream for spec in TOPOLOGY] == [
        Stream.INGRESS,
        Stream.COMMITTED,
        Stream.MANIFESTS,
        Stream.TOOL_CALLS,
        Stream.QUARANTINE,
        Stream.PREVIEWS,
        Stream.REJECTIONS,
        Stream.CHANGELOG,
    ]
    assert dict(SPEC_OF) == {spec.stream: spec for spec in TOPOLOGY}


def test_each_topic_is_written_projected_compacted_and_kept_as_the_table_says() -> None:
    rows = {
        spec.stream: (
            spec.written_by,
            spec.projected,
            spec.compacted,
            spec.retention_ms,
            spec.same_partitions_as_ingress,
        )
        for spec in TOPOLOGY
    }
    assert rows == {
        Stream.INGRESS: ("producers", False, False, None, False),
        Stream.COMMITTED: ("processor output", True, False, None, False),
        Stream.MANIFESTS: ("processor output", True, False, None, False),
        Stream.TOOL_CALLS: ("processor output", False, False, None, False),
        Stream.QUARANTINE: ("processor output", True, False, None, False),
        Stream.PREVIEWS: ("processor output", True, False, 3_600_000, False),
        Stream.REJECTIONS: ("processor output", True, False, None, False),
        Stream.CHANGELOG: ("processor state", False, True, None, True),
    }
    assert DEFAULT_PREVIEWS_RETENTION_MS == 3_600_000


def test_each_topic_says_what_it_carries() -> None:
    assert {spec.stream: spec.purpose for spec in TOPOLOGY} == {
        Stream.INGRESS: "every event, key = conversation id",
        Stream.COMMITTED: "committed turns with their revision",
        Stream.MANIFESTS: "manifests and every CAS decision",
        Stream.TOOL_CALLS: "calls of canonical responses",
        Stream.QUARANTINE: "late blocks, kept for audit",
        Stream.PREVIEWS: "revocable previews and retractions: never history, so short-lived",
        Stream.REJECTIONS: "typed rejections with reason codes",
        Stream.CHANGELOG: "the fold's state per conversation, restored on assignment",
    }


def test_a_spec_defaults_to_a_plain_topic_with_the_brokers_retention() -> None:
    spec = TopicSpec(Stream.INGRESS, "producers", False)
    assert (spec.compacted, spec.retention_ms, spec.same_partitions_as_ingress, spec.purpose) == (
        False,
        None,
        False,
        "",
    )


def test_the_processor_writes_six_outputs_and_the_projector_applies_five() -> None:
    assert OUTPUT_STREAMS == (
        Stream.COMMITTED,
        Stream.MANIFESTS,
        Stream.TOOL_CALLS,
        Stream.QUARANTINE,
        Stream.PREVIEWS,
        Stream.REJECTIONS,
    )
    assert PROJECTED_STREAMS == (
        Stream.COMMITTED,
        Stream.MANIFESTS,
        Stream.QUARANTINE,
        Stream.PREVIEWS,
        Stream.REJECTIONS,
    )


# ---------------------------------------------------------------------------------- topic settings


def test_the_changelog_is_created_compacted_with_the_brokers_retention() -> None:
    assert topic_settings(SPEC_OF[Stream.CHANGELOG]) == {"cleanup.policy": "compact"}


def test_previews_are_created_with_their_short_retention() -> None:
    assert topic_settings(SPEC_OF[Stream.PREVIEWS]) == {"retention.ms": "3600000"}


@pytest.mark.parametrize(
    "stream",
    [
        Stream.INGRESS,
        Stream.COMMITTED,
        Stream.MANIFESTS,
        Stream.TOOL_CALLS,
        Stream.QUARANTINE,
        Stream.REJECTIONS,
    ],
)
def test_the_other_topics_take_every_broker_default(stream: Stream) -> None:
    assert topic_settings(SPEC_OF[stream]) == {}
    assert topic_settings(SPEC_OF[stream], {}) == {}


def test_a_retention_given_for_a_stream_overrides_the_tables_or_the_brokers() -> None:
    given = {Stream.PREVIEWS: 60_000, Stream.INGRESS: 0, Stream.CHANGELOG: 7}
    assert topic_settings(SPEC_OF[Stream.PREVIEWS], given) == {"retention.ms": "60000"}
    assert topic_settings(SPEC_OF[Stream.INGRESS], given) == {"retention.ms": "0"}
    assert topic_settings(SPEC_OF[Stream.CHANGELOG], given) == {
        "cleanup.policy": "compact",
        "retention.ms": "7",
    }


def test_a_retention_given_for_other_streams_leaves_the_tables_alone() -> None:
    given = {Stream.INGRESS: 5}
    assert topic_settings(SPEC_OF[Stream.PREVIEWS], given) == {"retention.ms": "3600000"}
    assert topic_settings(SPEC_OF[Stream.COMMITTED], given) == {}


# ------------------------------------------------------------------------------------------ names


def test_a_name_is_the_prefix_verbatim_then_turnledger_dot_the_stream() -> None:
    topics = Topics("run-7.")
    assert topics.name(Stream.TOOL_CALLS) == "run-7.turnledger.tool-calls"
    assert topics.name("manifests") == "run-7.turnledger.manifests"
    assert Topics().name(Stream.INGRESS) == "turnledger.ingress"


def test_a_name_of_no_stream_is_refused() -> None:
    with pytest.raises(ValueError) as caught:
        Topics().name("turnledger.ingress")
    assert str(caught.value) == "'turnledger.ingress' is not a valid Stream"


def test_each_streams_topic_has_its_own_property() -> None:
    topics = Topics("p-")
    assert (
        topics.ingress,
        topics.committed,
        topics.manifests,
        topics.tool_calls,
        topics.previews,
        topics.quarantine,
        topics.rejections,
        topics.changelog,
    ) == (
        "p-turnledger.ingress",
        "p-turnledger.committed",
        "p-turnledger.manifests",
        "p-turnledger.tool-calls",
        "p-turnledger.previews",
        "p-turnledger.quarantine",
        "p-turnledger.rejections",
        "p-turnledger.changelog",
    )


def test_outputs_and_all_name_the_tables_topics_in_its_order() -> None:
    topics = Topics("p-")
    assert topics.outputs == (
        "p-turnledger.committed",
        "p-turnledger.manifests",
        "p-turnledger.tool-calls",
        "p-turnledger.quarantine",
        "p-turnledger.previews",
        "p-turnledger.rejections",
    )
    assert topics.all == (
        "p-turnledger.ingress",
        "p-turnledger.committed",
        "p-turnledger.manifests",
        "p-turnledger.tool-calls",
        "p-turnledger.quarantine",
        "p-turnledger.previews",
        "p-turnledger.rejections",
        "p-turnledger.changelog",
    )


def test_by_topic_maps_every_streams_topic_back_to_its_stream_by_default() -> None:
    by_topic = Topics("p-").by_topic()
    assert list(by_topic.items()) == [(f"p-turnledger.{s.value}", s) for s in Stream]


def test_by_topic_maps_only_the_streams_given_in_their_order() -> None:
    by_topic = Topics("p-").by_topic([Stream.REJECTIONS, Stream.COMMITTED])
    assert list(by_topic.items()) == [
        ("p-turnledger.rejections", Stream.REJECTIONS),
        ("p-turnledger.committed", Stream.COMMITTED),
    ]
