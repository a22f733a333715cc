"""The monitoring files of compose.yaml: Prometheus config and alert rules pass promtool, the dashboard is
Grafana JSON whose every panel queries Prometheus (tests/integration/test_live_metrics runs them)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def dashboard_expressions() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "turnledger.json").read_text())
    return [t["expr"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]]


def test_dashboard_panels_query_turnledger_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "turnledger.json").read_text())
    assert dashboard["uid"] == "turnledger"
    exprs = dashboard_expressions()
    assert len(exprs) == 30
    names = " ".join(exprs)
    for metric in (
        "turnledger_validator_rejections_total", "turnledger_orphaned_tool_results_total",
        "turnledger_duplicate_tool_results_total", "turnledger_unknown_settle_seconds_bucket",
        "turnledger_unknown_oldest_age_seconds", "turnledger_handle_recovery_attempts_total",
        "turnledger_late_blocks_total", "turnledger_preview_retractions_total",
        "turnledger_canonical_cas_conflicts_total", "turnledger_partial_tool_dispatches_total",
        "turnledger_processor_consumer_lag", "turnledger_processor_transaction_seconds_bucket",
        "turnledger_processor_state_keys", "turnledger_processor_fenced_total",
        "turnledger_provider_request_seconds_bucket", "turnledger_provider_errors_total",
        "turnledger_provider_time_to_first_delta_seconds_bucket", "turnledger_provider_failures_total",
        "turnledger_provider_retry_pause_seconds_bucket",
    ):  # fmt: skip
        assert metric in names, metric


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus")
def test_prometheus_config_and_rules_pass_promtool() -> None:
    config = subprocess.run(
        ["promtool", "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS: 1 rule files found" in config.stdout + config.stderr
