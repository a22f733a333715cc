"""The demo's checks of the promises, each against a clean workload (nothing counted) and with each kind of
violation it looks for seeded (counted exactly, worded exactly): a check that stopped counting would let
the demo, the chaos test and the integration tests that run it pass for nothing.

Here: a `Check` itself, the provider requests against the CAS-accepted manifests (promise 1), the tool
calls (promise 2), the replay audit (promise 5), and the list and summary the demo prints. The turns',
the operations' and the projections' checks have their own files. The workload is in `workload.py`."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.unit.demo.workload import (
    accepted_attempt,
    add,
    get,
    last_decision,
    manifest_issued,
    one,
    post,
    post_of,
    requests_of,
    without,
    workload,
)
from turnledger.demo.checks import (
    Check,
    all_checks,
    check_audit,
    check_sends,
    check_tool_dispatches,
    json_summary,
    partial_tool_dispatches,
)
from turnledger.model.events import DispatchDecision, DispatchState, ToolCallReady
from turnledger.replay.audit import AuditReport, Coordinates, Divergence
from turnledger.replay.evidence import Evidence

S = DispatchState
UNKNOWN_KEY = "sha256:" + "e" * 64


# ------------------------------------------------------------------ Check


def test_a_check_counts_every_violation_and_keeps_the_first_five_examples() -> None:
    check = Check("c")
    assert (check.checked, check.violations, check.examples, check.ok) == (0, 0, [], True)
    for n in range(7):
        check.fail(f"v{n}")
    assert check.violations == 7
    assert check.examples == ["v0", "v1", "v2", "v3", "v4"]
    assert check.ok is False


def test_one_violation_is_not_ok() -> None:
    check = Check("c")
    check.fail("v")
    assert (check.violations, check.examples, check.ok) == (1, ["v"], False)


def test_seven_violations_of_a_check_are_counted_with_five_examples() -> None:
    evidence = workload()
    requests = requests_of(evidence) + [get(f"req_1{n}", f"/v1/responses/resp_x{n}") for n in range(7)]
    check = check_sends(evidence, requests)
    assert (check.checked, check.violations) == (13, 7)
    assert check.examples == [
        f"req_1{n}: GET /v1/responses/resp_x{n} of unbound handle resp_x{n}" for n in range(5)
    ]


# ------------------------------------------------------------------ provider requests (promise 1)


def test_the_requests_of_accepted_attempts_resumes_and_cancels_of_bound_handles_are_not_counted() -> None:
    evidence = workload()
    check = check_sends(evidence, requests_of(evidence))
    assert check.name == "every provider request = bytes of a CAS-accepted manifest"
    assert (check.checked, check.violations, check.examples) == (6, 0, [])


def test_no_request_is_nothing_checked() -> None:
    check = check_sends(workload(), [])
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/resp_b1/",
        "/v1/responses/resp_b1?stream=true&starting_after=3",
        "/v1/responses/resp_b1/?stream=true",
    ],
)
def test_a_resume_of_a_bound_handle_is_read_without_its_query_and_trailing_slash(path: str) -> None:
    evidence = workload()
    check = check_sends(evidence, [get("req_9", path)])
    assert (check.checked, check.violations, check.examples) == (1, 0, [])


def test_only_slashes_are_stripped_off_the_end_of_a_resume_path() -> None:
    """Handles are the provider's ids, any characters: Anthropic's are base62 (`msg_01XF...`)."""
    evidence = workload()
    handle = "msg_01XFDUDYJgAACzvnptvVoYEX"
    add(evidence, last_decision(evidence, "a", "op-2").model_copy(update={"response_handle": handle}))
    check = check_sends(evidence, [get("req_9", f"/v1/responses/{handle}/")])
    assert (check.checked, check.violations, check.examples) == (1, 0, [])


@pytest.mark.parametrize(
    ("method", "path", "example"),
    [
        ("GET", "/v1/responses/resp_zz", "req_9: GET /v1/responses/resp_zz of unbound handle resp_zz"),
        (
            "GET",
            "/v1/responses/resp_zz/?stream=true",
            "req_9: GET /v1/responses/resp_zz/?stream=true of unbound handle resp_zz",
        ),
        (
            "POST",
            "/v1/responses/resp_zz/cancel",
            "req_9: POST /v1/responses/resp_zz/cancel of unbound handle resp_zz",
        ),
        ("GET", "/v1/responses/cancel", "req_9: GET /v1/responses/cancel of unbound handle responses"),
    ],
    ids=["resume", "resume-query", "cancel", "resume-of-a-handle-named-cancel"],
)
def test_a_resume_or_cancel_of_a_handle_no_decision_bound_is_counted(
    method: str, path: str, example: str
) -> None:
    evidence = workload()
    request = get("req_9", path) if method == "GET" else post("req_9", None, b"", path)
    check = check_sends(evidence, [request])
    assert (check.checked, check.violations, check.examples) == (1, 1, [example])


def test_a_handle_is_bound_by_the_decision_that_names_it_not_by_the_operation() -> None:
    """`msg_a1` is bound (a's op-1, whatever the path names it under); `msg_a3` no decision names."""
    evidence = workload()
    check = check_sends(
        evidence, [get("req_1", "/v1/responses/msg_a1"), get("req_2", "/v1/responses/msg_a3")]
    )
    assert (check.violations, check.examples) == (
        1,
        ["req_2: GET /v1/responses/msg_a3 of unbound handle msg_a3"],
    )


def test_a_request_without_an_idempotency_key_is_counted() -> None:
    evidence = workload()
    body = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    check = check_sends(evidence, [post("req_7", None, body)])
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == ["req_7: idempotency key … of no accepted attempt"]


def test_a_request_under_a_key_no_attempt_was_given_is_counted_with_the_keys_first_twenty_characters() -> (
    None
):
    evidence = workload()
    body = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    check = check_sends(evidence, [post("req_7", UNKNOWN_KEY, body)])
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == ["req_7: idempotency key sha256:eeeeeeeeeeeee… of no accepted attempt"]


@pytest.mark.parametrize(
    "update",
    [
        {"accepted": False},  # a refused attempt's key
        {"state": S.SENT},  # a key seen only in a decision that is not the send CAS's
        {"state": S.PREPARED, "accepted": False},
    ],
    ids=["refused", "not-dispatching", "refused-prepared"],
)
def test_a_key_that_no_accepted_dispatching_decision_gave_is_no_accepted_attempt(
    update: dict[str, object],
) -> None:
    evidence = workload()
    attempt = accepted_attempt(evidence, "a", "op-1")
    add(evidence, attempt.model_copy(update={**update, "idempotency_key": UNKNOWN_KEY}))
    body = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    check = check_sends(evidence, [post("req_7", UNKNOWN_KEY, body)])
    assert (check.violations, check.examples) == (
        1,
        ["req_7: idempotency key sha256:eeeeeeeeeeeee… of no accepted attempt"],
    )


def test_an_accepted_attempt_without_a_key_gives_none() -> None:
    """An accepted DISPATCHING decision that carries no key accepts no request, not even a keyless one."""
    evidence = workload()
    attempt = accepted_attempt(evidence, "a", "op-1")
    add(evidence, attempt.model_copy(update={"idempotency_key": ""}))
    body = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    check = check_sends(evidence, [post("req_7", "", body)])
    assert (check.violations, check.examples) == (1, ["req_7: idempotency key … of no accepted attempt"])


def test_a_request_of_an_accepted_attempt_whose_manifest_is_not_on_the_topic_is_counted() -> None:
    evidence = workload()
    request = post_of(evidence, "req_7", "a", "op-2")
    without(evidence, manifest_issued(evidence, "a", "op-2"))
    check = check_sends(evidence, [request])
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == [
        f"req_7: idempotency key {request.headers['idempotency-key'][:20]}… of no accepted attempt"
    ]


def _reencoded(sent: bytes) -> bytes:
    """The same JSON, spaced as `json.dumps` spaces it: equal as data, not as bytes."""
    return json.dumps(json.loads(sent)).encode()


@pytest.mark.parametrize(
    "change",
    [lambda sent: b"", lambda sent: b"{}", lambda sent: sent + b" ", _reencoded],
    ids=["empty", "other", "one-byte-more", "re-encoded"],
)
def test_a_request_whose_bytes_are_not_its_manifests_is_counted(change: Callable[[bytes], bytes]) -> None:
    evidence = workload()
    key = accepted_attempt(evidence, "a", "op-1").idempotency_key
    sent = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    assert change(sent) != sent
    check = check_sends(evidence, [post("req_7", key, change(sent))])
    assert (check.checked, check.violations) == (1, 1)
    assert check.examples == ["req_7: body differs from manifest of ('a', 'op-1')"]


def test_a_request_is_held_to_the_manifest_of_the_operation_its_key_accepted() -> None:
    """op-2's bytes under op-1's key: the bytes of a manifest, but not of the one the key was given for."""
    evidence = workload()
    key = accepted_attempt(evidence, "a", "op-1").idempotency_key
    other = manifest_issued(evidence, "a", "op-2").manifest.request_body.encode()
    check = check_sends(evidence, [post("req_7", key, other)])
    assert (check.violations, check.examples) == (1, ["req_7: body differs from manifest of ('a', 'op-1')"])


def test_manifests_and_attempts_are_told_apart_by_conversation() -> None:
    """a/op-1 and b/op-1 share their operation id: each key is held to its own conversation's manifest."""
    evidence = workload()
    key = accepted_attempt(evidence, "b", "op-1").idempotency_key
    a_body = manifest_issued(evidence, "a", "op-1").manifest.request_body.encode()
    check = check_sends(evidence, [post_of(evidence, "req_1", "b", "op-1"), post("req_2", key, a_body)])
    assert (check.checked, check.violations) == (2, 1)
    assert check.examples == ["req_2: body differs from manifest of ('b', 'op-1')"]


def test_every_violation_of_the_requests_is_counted_in_order() -> None:
    evidence = workload()
    key = accepted_attempt(evidence, "a", "op-2").idempotency_key
    requests = [
        *requests_of(evidence),
        post("req_8", key, b"{}"),
        get("req_9", "/v1/responses/resp_q"),
        post("req_10", UNKNOWN_KEY, b"{}"),
    ]
    check = check_sends(evidence, requests)
    assert (check.checked, check.violations) == (9, 3)
    assert check.examples == [
        "req_8: body differs from manifest of ('a', 'op-2')",
        "req_9: GET /v1/responses/resp_q of unbound handle resp_q",
        "req_10: idempotency key sha256:eeeeeeeeeeeee… of no accepted attempt",
    ]


# ------------------------------------------------------------------ tool calls (promise 2)


def test_a_complete_schema_valid_tool_call_is_not_counted() -> None:
    check = check_tool_dispatches(workload())
    assert check.name == "every dispatched tool call is complete and schema-valid"
    assert (check.checked, check.violations, check.examples) == (1, 0, [])
    assert partial_tool_dispatches(check) == 0


def test_no_tool_call_is_nothing_checked() -> None:
    check = check_tool_dispatches(Evidence())
    assert (check.checked, check.violations, check.examples) == (0, 0, [])


@pytest.mark.parametrize(
    ("update", "example"),
    [
        ({"arguments": '{"city":'}, "a/op-1 call_1: cut at 8: Expecting value at 8"),
        ({"arguments": '{"city":7}'}, "a/op-1 call_1: /city: 7 is not of type 'string'"),
        ({"tool_name": "get_time"}, "a/op-1 call_1: tool get_time was not offered"),
        ({"conversation_id": "c"}, "c/op-1 call_1: tool get_weather was not offered"),
    ],
    ids=["truncated", "schema", "not-offered", "other-conversation"],
)
def test_a_partial_or_unoffered_tool_call_is_counted(update: dict[str, str], example: str) -> None:
    evidence = workload()
    add(evidence, one(evidence, ToolCallReady).model_copy(update=update))
    check = check_tool_dispatches(evidence)
    assert (check.checked, check.violations, check.examples) == (2, 1, [example])
    assert partial_tool_dispatches(check) == 1


def test_every_partial_tool_call_is_counted() -> None:
    evidence = workload()
    call = one(evidence, ToolCallReady)
    add(evidence, *(call.model_copy(update={"call_id": f"call_{n}", "arguments": "{"}) for n in range(2, 5)))
    check = check_tool_dispatches(evidence)
    assert (check.checked, check.violations, partial_tool_dispatches(check)) == (4, 3, 3)
    assert check.examples == [
        f"a/op-1 call_{n}: cut at 1: Expecting property name enclosed in double quotes at 1"
        for n in range(2, 5)
    ]


# ------------------------------------------------------------------ replay audit (promise 5)


def test_an_audit_without_divergence_counts_what_it_compared() -> None:
    check = check_audit(AuditReport(ingress_records=23, expected=31, actual=31, checked=31))
    assert check.name == "replay audit: re-fold of the ingress log is byte-identical"
    assert (check.checked, check.violations, check.examples) == (31, 0, [])


def test_each_divergence_is_a_violation_named_where_it_is_or_whence_it_came() -> None:
    committed = Coordinates("tl.committed", 0, 3)
    ingress = Coordinates("tl.ingress", 1, 7)
    report = AuditReport(
        checked=9,
        divergences=[
            Divergence("differs", "committed", "a", 0, committed, ingress),
            Divergence("missing", "manifests", "b", 2, None, ingress),
            Divergence("extra", "previews", "c", 4, Coordinates("tl.previews", 2, 11), None),
        ],
    )
    check = check_audit(report)
    assert (check.checked, check.violations) == (9, 3)
    assert check.examples == [
        "differs committed key a #0 at tl.committed[0]@3",
        "missing manifests key b #2 at tl.ingress[1]@7",
        "extra previews key c #4 at tl.previews[2]@11",
    ]


# ------------------------------------------------------------------ the list and the summary


def test_all_checks_are_the_seven_of_the_topics_and_the_requests_in_order() -> None:
    evidence = workload()
    checks = all_checks(evidence, requests_of(evidence), moving=["a"])
    assert [(c.name, c.checked, c.violations) for c in checks] == [
        ("every provider request = bytes of a CAS-accepted manifest", 6, 0),
        ("every dispatched tool call is complete and schema-valid", 1, 0),
        ("at most one canonical assistant turn per conversation revision", 2, 0),
        ("every submitted turn is committed or rejected, exactly once", 6, 0),
        ("no commit or tool call of a cancelled operation", 2, 0),
        ("every dispatch settled (committed, rejected or cancelled)", 3, 0),
        ("every dispatch of a conversation moving between APIs completes, none refused", 2, 0),
    ]


def test_all_checks_without_moving_conversations_check_none_moving() -> None:
    evidence = workload()
    assert (all_checks(evidence, requests_of(evidence))[-1].checked) == 0


def test_all_checks_pass_the_moving_conversations_to_the_moving_check() -> None:
    """b's only dispatch was cancelled by its client: not a completed one."""
    evidence = workload()
    check = all_checks(evidence, requests_of(evidence), moving=["b"])[-1]
    assert (check.checked, check.violations) == (1, 1)


def test_all_checks_pass_the_requests_to_the_requests_check() -> None:
    evidence = workload()
    checks = all_checks(evidence, [get("req_9", "/v1/responses/resp_zz")])
    assert (checks[0].checked, checks[0].violations) == (1, 1)
    assert [c.violations for c in checks[1:]] == [0, 0, 0, 0, 0, 0]


def test_the_summary_is_one_json_list_of_name_checked_and_violations() -> None:
    first, second = Check("one", checked=3), Check("two", checked=2)
    second.fail("x")
    text = json_summary([first, second])
    assert text == (
        '[{"check": "one", "checked": 3, "violations": 0}, {"check": "two", "checked": 2, "violations": 1}]'
    )
    assert json.loads(text)[1] == {"check": "two", "checked": 2, "violations": 1}


def test_decisions_of_the_workload_are_the_folds_own() -> None:
    """The workload's attempts are the send CAS's: one accepted DISPATCHING decision per operation."""
    evidence = workload()
    keys = {d.idempotency_key for d in evidence.of("manifests", DispatchDecision) if d.state == S.DISPATCHING}
    assert len(keys) == 3 and all(k and k.startswith("sha256:") for k in keys)
