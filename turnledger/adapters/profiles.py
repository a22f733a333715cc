"""One row per provider API: how its requests are addressed, framed, authenticated and resumed.

Everything outside the adapters that depends on which API a manifest is for reads
this table instead of naming APIs: the worker's endpoints (path, auth, resume), the
stream pump (framing, the provider's own event numbers, where the handle comes from)
and the client (the dispatch policy that makes the adapter render a streaming
request). An adapter's role rules stay in its own rules table; the call-id rule is
shared: new adapter versions copy `id_rule` into their rules (so into their digest).

Facts (provider-formats.md): only an OpenAI Responses request with `"background": true`
and `"stream": true` is kept by the provider and can be streamed again by its id;
every other stream is gone with its connection. Background mode keeps the response
data for about 10 minutes whatever `store` says (OpenAI's background-mode guide:
"not Zero Data Retention (ZDR) compatible"), so a dispatch that asks for `store: false`
is sent without it and is not resumed (`ResumeRule.ruled_out_by`). Gemini and Bedrock stream by
endpoint (no body flag); Bedrock's stream is the binary AWS event stream and carries
no response id, so its handle is the `x-amzn-RequestId` response header. None of the
five APIs documents replay by idempotency key (the pinned SDKs set no idempotency
header); the worker still sends the CAS's key in `idempotency-key`, which a keeping
gateway (or the fake provider) may honor, and `keeps_idempotency_keys` says whether
recovery may rely on it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from turnledger.adapters.base import UnknownAdapterError
from turnledger.adapters.call_ids import IdRule


class Framing(StrEnum):
    SSE = "sse"
    AWS_EVENT_STREAM = "aws-event-stream"


class AuthScheme(StrEnum):
    BEARER = "bearer"  # Authorization: Bearer <key>
    X_API_KEY = "x-api-key"  # x-api-key: <key> (Anthropic, with anthropic-version)
    GOOG_API_KEY = "x-goog-api-key"  # x-goog-api-key: <key> (never ?key=: URLs get logged)
    AWS_SIGV4 = "aws-sigv4"  # botocore's SigV4 signer over the exact request


@dataclass(frozen=True)
class ResumeRule:
    """A kept response is read again with GET `path` (`{handle}` filled) when every flag is true, and
    stopped at the provider with POST `cancel_path` (how a cancelled attempt is confirmed terminated).

    `ruled_out_by`: (key, value) pairs of a dispatch policy, or a request body, that rule keeping out:
    the stream policy of such a dispatch leaves out the flags only keeping needs (every flag but the
    stream flag), and such a request is not resumable whatever its flags say."""

    path: str
    requires_flags: tuple[str, ...]
    cancel_path: str | None = None
    ruled_out_by: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class ProviderProfile:
    api: str
    request_path: str  # `{model}` is the manifest model (URL-quoted), for APIs that address it there
    framing: Framing
    auth: AuthScheme
    id_rule: IdRule
    stream_flag: str | None = "stream"  # body flag that asks for a stream; None: the endpoint streams
    stream_policy_data: Mapping[str, Any] = field(default_factory=dict)
    resume: ResumeRule | None = None
    wire_sequence_field: str | None = None  # the provider's own event number (wire dedup)
    handle_header: str | None = None  # response header carrying the handle (streams without ids)
    idempotency_header: str | None = "idempotency-key"
    keeps_idempotency_keys: bool = False
    fixed_headers: Mapping[str, str] = field(default_factory=dict)  # defaults; configuration may override
    signing_service: str | None = None  # SigV4 service name

    def stream_policy(self, policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The dispatch policy that makes this API's adapter render a streaming request (a fresh copy),
        for a dispatch of `policy`: one that rules keeping out gets none of the flags only keeping needs."""
        data = copy.deepcopy(dict(self.stream_policy_data))
        if self.resume is not None and self.rules_out_keeping(policy):
            for flag in self.resume.requires_flags:
                if flag != self.stream_flag:
                    data.pop(flag, None)
        return data

    def rules_out_keeping(self, values: Mapping[str, Any] | None) -> bool:
        """Does this policy or body hold a value that rules keeping the response out?"""
        if self.resume is None or values is None:
            return False
        return any(values.get(key) is value for key, value in self.resume.ruled_out_by)

    def path_for(self, model: str) -> str:
        return self.request_path.format(model=quote(model, safe=""))

    def resume_path(self, handle: str) -> str | None:
        return None if self.resume is None else self.resume.path.format(handle=quote(handle, safe=""))

    def cancel_path(self, handle: str) -> str | None:
        if self.resume is None or self.resume.cancel_path is None:
            return None
        return self.resume.cancel_path.format(handle=quote(handle, safe=""))

    def streams(self, body: Mapping[str, Any] | None) -> bool:
        """Does this exact request body ask for a stream?"""
        if self.stream_flag is None:
            return True
        return body is not None and body.get(self.stream_flag) is True

    def resumable(self, body: Mapping[str, Any] | None) -> bool:
        """Can a broken stream of this exact request be read again from its handle?"""
        if self.resume is None or body is None or self.rules_out_keeping(body):
            return False
        return all(body.get(flag) is True for flag in self.resume.requires_flags)


ANTHROPIC_IDS = IdRule(pattern=r"[a-zA-Z0-9_-]+")
OPENAI_CHAT_IDS = IdRule(max_length=40)
OPENAI_RESPONSES_IDS = IdRule(max_length=64)
GEMINI_IDS = IdRule(omit_prefix="gemini:")  # our synthetic ids: Gemini pairs those by position
BEDROCK_IDS = IdRule(pattern=r"[a-zA-Z0-9_-]+", max_length=64)

_PROFILES: tuple[ProviderProfile, ...] = (
    ProviderProfile(
        api="anthropic-messages",
        request_path="/v1/messages",
        framing=Framing.SSE,
        auth=AuthScheme.X_API_KEY,
        id_rule=ANTHROPIC_IDS,
        stream_policy_data={"stream": True},
        fixed_headers={"anthropic-version": "2023-06-01"},
    ),
    ProviderProfile(
        api="openai-chat",
        request_path="/v1/chat/completions",
        framing=Framing.SSE,
        auth=AuthScheme.BEARER,
        id_rule=OPENAI_CHAT_IDS,
        stream_policy_data={"stream": True, "stream_options": {"include_usage": True}},
    ),
    ProviderProfile(
        api="openai-responses",
        request_path="/v1/responses",
        framing=Framing.SSE,
        auth=AuthScheme.BEARER,
        id_rule=OPENAI_RESPONSES_IDS,
        # background mode is what makes a Responses stream resumable by its id after a disconnect; it
        # keeps the response for a while even with `store: false`, which asks that nothing be kept
        stream_policy_data={"stream": True, "background": True},
        resume=ResumeRule(
            "/v1/responses/{handle}?stream=true",
            ("stream", "background"),
            "/v1/responses/{handle}/cancel",
            ruled_out_by=(("store", False),),
        ),
        wire_sequence_field="sequence_number",
    ),
    ProviderProfile(
        api="gemini",
        request_path="/v1beta/models/{model}:streamGenerateContent?alt=sse",
        framing=Framing.SSE,
        auth=AuthScheme.GOOG_API_KEY,
        id_rule=GEMINI_IDS,
        stream_flag=None,
    ),
    ProviderProfile(
        api="bedrock-converse",
        request_path="/model/{model}/converse-stream",
        framing=Framing.AWS_EVENT_STREAM,
        auth=AuthScheme.AWS_SIGV4,
        id_rule=BEDROCK_IDS,
        stream_flag=None,
        handle_header="x-amzn-requestid",
        signing_service="bedrock",
    ),
)

PROFILES: Mapping[str, ProviderProfile] = MappingProxyType({p.api: p for p in _PROFILES})


def api_of(adapter_id: str) -> str:
    """`anthropic-messages@1` → `anthropic-messages`."""
    return adapter_id.partition("@")[0]


def profile_for(adapter_id: str) -> ProviderProfile:
    """The profile of an adapter id (`api@version`) or of a bare api name."""
    try:
        return PROFILES[api_of(adapter_id)]
    except KeyError:
        raise UnknownAdapterError(adapter_id) from None
