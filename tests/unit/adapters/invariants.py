"""Per-API invariant oracle, written from the provider error texts (reference 1a-1e).

Each checker takes a parsed request body and returns violations, each prefixed with
the provider error it would trigger. The SDK types cannot express any of these
(pairing, order, grouping), which is why this oracle exists beside the shape oracle.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

Body = dict[str, Any]


def _dupes(ids: list[str]) -> list[str]:
    return sorted(i for i, n in Counter(ids).items() if n > 1)


def check_anthropic(body: Body) -> list[str]:
    v: list[str] = []
    messages = body["messages"]
    all_use_ids: list[str] = []
    if messages and messages[0]["role"] != "user":
        v.append("first message must use the user role")
    for i, m in enumerate(messages):
        if m["role"] not in ("user", "assistant"):
            v.append(f"messages.{i}: role {m['role']!r} (system goes top-level)")
        if i and messages[i - 1]["role"] == m["role"]:
            v.append(
                f"messages.{i}: consecutive {m['role']} turns (server merges them: results may follow text)"
            )
        content = m["content"]
        if not content:
            v.append(f"messages.{i}: empty content")
        for j, p in enumerate(content):
            nested = p.get("content") if p["type"] == "tool_result" else None
            for text in [p] if p["type"] == "text" else nested if isinstance(nested, list) else []:
                if not text["text"].strip():
                    v.append(
                        f"messages.{i}.content.{j}: text content blocks must contain non-whitespace text"
                    )
            if p["type"] == "thinking" and not p.get("signature"):
                v.append(f"messages.{i}.content.{j}: thinking block without signature")
            if p["type"] in ("tool_use", "thinking") and m["role"] != "assistant":
                v.append(f"messages.{i}.content.{j}: {p['type']} outside an assistant message")
            if p["type"] == "tool_result" and m["role"] != "user":
                v.append(f"messages.{i}.content.{j}: tool_result outside a user message")
        uses = [p["id"] for p in content if p["type"] == "tool_use"]
        all_use_ids += uses
        if uses:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = (
                {p["tool_use_id"] for p in nxt["content"] if p["type"] == "tool_result"} if nxt else set()
            )
            missing = [u for u in uses if u not in answered]
            if missing:
                v.append(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {missing}"
                )
        results = [p for p in content if p["type"] == "tool_result"]
        if results:
            prev = messages[i - 1] if i else None
            prev_uses = {p["id"] for p in prev["content"] if p["type"] == "tool_use"} if prev else set()
            for j, p in enumerate(content):
                if p["type"] == "tool_result" and p["tool_use_id"] not in prev_uses:
                    v.append(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks"
                    )
            seen_text = False
            for p in content:
                if p["type"] != "tool_result":
                    seen_text = True
                elif seen_text:
                    v.append(f"messages.{i}: text before tool_result")
                    break
            if _dupes([p["tool_use_id"] for p in results]):
                v.append(f"messages.{i}: duplicate tool_result ids")
    if _dupes(all_use_ids):
        v.append(f"duplicate tool_use ids {_dupes(all_use_ids)}")
    if all_use_ids and not body.get("tools"):
        v.append("requests which include tool_use or tool_result blocks must define tools")
    return v


_BEDROCK_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def check_bedrock(body: Body) -> list[str]:
    v: list[str] = []
    messages = body["messages"]
    if messages and messages[0]["role"] != "user":
        v.append("A conversation must start with a user message")
    any_tool = False
    for i, m in enumerate(messages):
        if m["role"] not in ("user", "assistant"):
            v.append(f"messages.{i}: role {m['role']!r}")
        if i and messages[i - 1]["role"] == m["role"]:
            v.append("A conversation must alternate between user and assistant roles")
        content = m["content"]
        if not content:
            v.append(f"messages.{i}: empty content")
        for p in content:
            for text in [p] if "text" in p else p["toolResult"]["content"] if "toolResult" in p else []:
                if "text" in text and not text["text"].strip():
                    v.append(f"messages.{i}: blank text")
        uses = [p["toolUse"]["toolUseId"] for p in content if "toolUse" in p]
        any_tool = any_tool or bool(uses)
        for u in uses:
            if not _BEDROCK_ID.fullmatch(u):
                v.append(f"messages.{i}: toolUseId {u!r} violates [a-zA-Z0-9_-]{{1,64}}")
        if _dupes(uses):
            v.append(f"The toolUse blocks at messages.{i}.content contain duplicate Ids")
        if uses:
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            got = (
                {p["toolResult"]["toolUseId"] for p in nxt["content"] if "toolResult" in p} if nxt else set()
            )
            missing = [u for u in uses if u not in got]
            if missing:
                v.append(
                    f"Expected toolResult blocks at messages.{i + 1}.content for the following Ids: {missing}"
                )
        results = [p["toolResult"] for p in content if "toolResult" in p]
        if results:
            any_tool = True
            prev = messages[i - 1] if i else None
            prev_uses = (
                {p["toolUse"]["toolUseId"] for p in prev["content"] if "toolUse" in p} if prev else set()
            )
            for r in results:
                if r["toolUseId"] not in prev_uses:
                    v.append(
                        f"messages.{i}: toolResult {r['toolUseId']} without toolUse in the previous message"
                    )
                if r.get("status") == "error" and not any(
                    c.get("text") or c.get("json") for c in r["content"]
                ):
                    v.append(f"messages.{i}: error-status toolResult with empty content")
            kinds = ["r" if "toolResult" in p else "t" for p in content]
            if "".join(kinds).find("tr") >= 0:
                v.append(f"messages.{i}: text before toolResult")
    if any_tool and not body.get("toolConfig"):
        v.append("toolConfig must be present when history has toolUse/toolResult")
    return v


def check_openai_chat(body: Body) -> list[str]:
    v: list[str] = []
    messages = body["messages"]
    ids: list[str] = []
    for i, m in enumerate(messages):
        role = m["role"]
        if role not in ("system", "developer", "user", "assistant", "tool"):
            v.append(f"messages.{i}: role {role!r}")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls and not m.get("content"):
                v.append(f"messages.{i}: assistant content required unless tool_calls is specified")
            for c in calls:
                if not isinstance(c["function"]["arguments"], str):
                    v.append(f"messages.{i}: arguments must be a JSON string")
            call_ids = [c["id"] for c in calls]
            ids += call_ids
            if call_ids:
                j = i + 1
                answered: list[str] = []
                while j < len(messages) and messages[j]["role"] == "tool":
                    answered.append(messages[j]["tool_call_id"])
                    j += 1
                missing = [c for c in call_ids if c not in answered]
                if missing:
                    v.append(
                        "An assistant message with 'tool_calls' must be followed by tool messages "
                        "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                        f"response messages: {missing}"
                    )
                if _dupes(answered) or set(answered) - set(call_ids):
                    v.append(f"messages.{i}: tool messages do not match tool_calls one to one")
        if role == "tool":
            j = i - 1
            while j >= 0 and messages[j]["role"] == "tool":
                j -= 1
            owner = messages[j] if j >= 0 else None
            owner_ids = (
                {c["id"] for c in (owner.get("tool_calls") or [])}
                if owner and owner["role"] == "assistant"
                else set()
            )
            if m["tool_call_id"] not in owner_ids:
                v.append(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    f"with 'tool_calls'. (messages.[{i}].role)"
                )
    if _dupes(ids):
        v.append(f"duplicate tool_call ids {_dupes(ids)}")
    if "parallel_tool_calls" in body and not body.get("tools"):
        v.append("parallel_tool_calls is only allowed when tools are specified")
    return v


def check_openai_responses(body: Body) -> list[str]:
    v: list[str] = []
    items = body["input"]
    calls_seen: set[str] = set()
    all_calls = [it["call_id"] for it in items if it.get("type") == "function_call"]
    outputs = {it["call_id"] for it in items if it.get("type") == "function_call_output"}
    for c in all_calls:
        if c not in outputs:
            v.append(f"No tool output found for function call {c}.")
    if _dupes(all_calls):
        v.append(f"duplicate call_id {_dupes(all_calls)}")
    for i, it in enumerate(items):
        t = it.get("type")
        if t == "function_call":
            calls_seen.add(it["call_id"])
            if not isinstance(it["arguments"], str):
                v.append(f"input.{i}: arguments must be a string")
        elif t == "function_call_output":
            if it.get("call_id") not in calls_seen:
                v.append(f"No tool call found for function call output with call_id {it.get('call_id')}.")
        elif t == "reasoning":
            nxt = items[i + 1] if i + 1 < len(items) else None
            ok = nxt is not None and (
                nxt.get("type") in ("function_call", "reasoning")
                or (nxt.get("type") == "message" and nxt.get("role") == "assistant")
            )
            if not ok:
                v.append(
                    f"Item '{it.get('id')}' of type 'reasoning' was provided without its "
                    "required following item."
                )
            if not str(it.get("id", "")).startswith("rs_"):
                v.append(f"input.{i}: reasoning item id is not an rs_ id")
        elif t == "message":
            if it["role"] == "assistant":
                if not isinstance(it["content"], str) and any(
                    p.get("type") == "input_text" for p in it["content"]
                ):
                    v.append(f"input.{i}: assistant content must be output_text, not input_text")
            elif it["role"] not in ("user", "system", "developer"):
                v.append(f"input.{i}: role {it['role']!r}")
        else:
            v.append(f"input.{i}: unexpected item type {t!r}")
    if "parallel_tool_calls" in body and not body.get("tools"):
        v.append("parallel_tool_calls is only allowed when tools are specified")
    return v


def check_gemini(body: Body) -> list[str]:
    v: list[str] = []
    contents = body["contents"]

    def calls(c: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in c["parts"] if "functionCall" in p]

    def responses(c: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in c["parts"] if "functionResponse" in p]

    for i, c in enumerate(contents):
        if c.get("role") not in ("user", "model"):
            v.append(f"contents.{i}: role {c.get('role')!r}")
        if not c["parts"]:
            v.append(f"contents.{i}: empty parts")
        for p in c["parts"]:
            # Gemini itself sends a signature on an empty text part, which must go back as it came
            # (reference/provider-formats.md §2d): only an unsigned empty part is refused.
            if "text" in p and p["text"] == "" and "thoughtSignature" not in p:
                v.append(f"contents.{i}: empty text part")
        fc = calls(c)
        if fc:
            if c["role"] != "model":
                v.append(f"contents.{i}: functionCall outside a model content")
            prev = contents[i - 1] if i else None
            if prev is None or prev.get("role") != "user":
                v.append(
                    "Please ensure that function call turns come immediately after a user turn or after a "
                    f"function response turn (contents.{i})"
                )
            nxt = contents[i + 1] if i + 1 < len(contents) else None
            fr = responses(nxt) if nxt else []
            if len(fr) != len(fc):
                v.append(
                    "Please ensure that the number of function response parts is equal to the number of "
                    f"function call parts of the function call turn. (contents.{i})"
                )
            if {p["functionCall"].get("id") for p in fc} != {p["functionResponse"].get("id") for p in fr}:
                v.append(f"contents.{i}: function response ids do not match call ids")
            if any("thoughtSignature" in p for p in fc) and "thoughtSignature" not in fc[0]:
                v.append(
                    "Function call is missing a thought_signature in functionCall parts "
                    "(first call of the step)"
                )
        fr = responses(c)
        if fr:
            prev = contents[i - 1] if i else None
            if prev is None or not calls(prev):
                v.append(
                    "Please ensure that function response turn comes immediately after a function call turn "
                    f"(contents.{i})"
                )
    return v


CHECKERS: dict[str, Callable[[Body], list[str]]] = {
    "anthropic-messages": check_anthropic,
    "bedrock-converse": check_bedrock,
    "openai-chat": check_openai_chat,
    "openai-responses": check_openai_responses,
    "gemini": check_gemini,
}
