"""What a processor is configured with (processors/config.py): the transactional id that fences a
partition's earlier owner, the group's timeouts and the revocation budget they leave, the settings'
defaults and refusals, and the commit times a partition counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnledger.errors import KafkaSettingsError
from turnledger.processors.config import (
    GroupSettings,
    ProcessorConfig,
    ProcessorExit,
    ProcessorMetrics,
    transactional_id,
)
from turnledger.retry import FOREVER
from turnledger.topology import Topics


def test_the_transactional_id_is_app_topic_and_partition() -> None:
    assert transactional_id("ledger-a", "p-turnledger.ingress", 7) == "ledger-a-p-turnledger.ingress-7"


# ------------------------------------------------------------------------------------------- group


def test_group_defaults_are_a_10s_session_3s_heartbeats_and_the_session_as_rebalance_timeout() -> None:
    group = GroupSettings()
    assert (group.session_timeout_ms, group.heartbeat_interval_ms, group.rebalance_timeout_ms) == (
        10_000,
        3_000,
        None,
    )


@pytest.mark.parametrize(("heartbeat_ms", "session_ms"), [(10_000, 10_000), (10_001, 10_000)])
def test_a_heartbeat_not_below_the_session_timeout_is_refused(heartbeat_ms: int, session_ms: int) -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        GroupSettings(session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms)
    assert str(caught.value) == (
        f"--heartbeat-interval-ms {heartbeat_ms} must be below --session-timeout-ms {session_ms} "
        "(a third of it at most is usual)"
    )
    assert isinstance(caught.value, ValueError)


def test_a_heartbeat_just_below_the_session_timeout_is_accepted() -> None:
    assert GroupSettings(session_timeout_ms=6_000, heartbeat_interval_ms=5_999).heartbeat_interval_ms == 5_999


def test_the_revocation_budget_is_sixty_percent_of_the_session_timeout_without_a_rebalance_timeout() -> None:
    assert GroupSettings().revocation_budget_s == 6.0
    assert GroupSettings(session_timeout_ms=30_000).revocation_budget_s == 18.0


def test_the_revocation_budget_is_sixty_percent_of_the_rebalance_timeout_when_set() -> None:
    assert GroupSettings(rebalance_timeout_ms=45_000).revocation_budget_s == 27.0


def test_the_revocation_budget_is_never_below_half_a_second() -> None:
    assert GroupSettings(session_timeout_ms=500, heartbeat_interval_ms=100).revocation_budget_s == 0.5
    assert GroupSettings(session_timeout_ms=900, heartbeat_interval_ms=100).revocation_budget_s == 0.54


# ----------------------------------------------------------------------------------------- processor


def test_processor_defaults() -> None:
    config = ProcessorConfig("kafka:9092")
    assert config.bootstrap == "kafka:9092"
    assert config.app_id == "turnledger"
    assert config.topics == Topics()
    assert (config.batch_max_records, config.batch_max_ms, config.idle_poll_ms) == (500, 100, 100)
    assert config.state_dir is None and config.group_id is None
    assert config.group == GroupSettings()
    assert config.transaction_timeout_ms == 60_000
    assert (config.pipelined_commits, config.group_commit) == (True, False)
    assert (config.producer_retry_backoff_ms, config.producer_max_batch_bytes) == (20, 524_288)
    assert (config.max_consecutive_aborts, config.retry_backoff_ms) == (10, 200)
    assert config.outage is FOREVER
    assert config.gc_gen0_threshold == 10_000


def test_each_config_gets_its_own_group_settings_and_topics() -> None:
    a, b = ProcessorConfig("k:1"), ProcessorConfig("k:1")
    assert a.group == b.group and a.topics == b.topics


def test_offsets_live_in_the_group_named_or_else_under_the_app_id() -> None:
    assert ProcessorConfig("k:1", app_id="ledger-a").offsets_group == "ledger-a"
    assert ProcessorConfig("k:1", app_id="ledger-a", group_id="offsets-a").offsets_group == "offsets-a"


@pytest.mark.parametrize(
    ("records", "ms"),
    [(0, 100), (500, 0), (-1, 100), (500, -1)],
    ids=["records", "ms", "neg-records", "neg-ms"],
)
def test_a_batch_bound_below_one_is_refused(records: int, ms: int) -> None:
    with pytest.raises(ValueError) as caught:
        ProcessorConfig("k:1", batch_max_records=records, batch_max_ms=ms)
    assert str(caught.value) == "batch_max_records and batch_max_ms must be positive"


def test_a_batch_of_one_record_or_one_millisecond_is_accepted() -> None:
    config = ProcessorConfig("k:1", batch_max_records=1, batch_max_ms=1, state_dir=Path("/state"))
    assert (config.batch_max_records, config.batch_max_ms) == (1, 1)


# ------------------------------------------------------------------------------------------ metrics


def test_metrics_start_at_zero() -> None:
    metrics = ProcessorMetrics()
    assert vars_of(metrics) == {
        "records_in": 0,
        "outputs_out": 0,
        "changelog_out": 0,
        "batches": 0,
        "poison_records": 0,
        "aborted_batches": 0,
        "restored_records": 0,
        "restores": 0,
        "restore_seconds_last": 0.0,
        "ownerships": 0,
        "txn_commit_seconds_total": 0.0,
        "txn_commit_seconds_max": 0.0,
    }


def test_commit_times_add_up_and_the_longest_is_kept() -> None:
    metrics = ProcessorMetrics()
    metrics.observe_commit(0.25)
    metrics.observe_commit(1.5)
    metrics.observe_commit(0.5)
    assert (metrics.txn_commit_seconds_total, metrics.txn_commit_seconds_max) == (2.25, 1.5)


def test_how_a_partitions_ownership_ended_has_two_words() -> None:
    assert [(e.name, e.value) for e in ProcessorExit] == [("STOPPED", "stopped"), ("FENCED", "fenced")]


def vars_of(metrics: ProcessorMetrics) -> dict[str, object]:
    return {name: getattr(metrics, name) for name in ProcessorMetrics.__slots__}
