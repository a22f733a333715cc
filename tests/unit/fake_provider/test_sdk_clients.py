"""The official clients as the fake's oracle: each SDK streams from the fake provider over HTTP, with
its own request building, authentication, framing and parsing, and accepts every byte it sends.

openai (Chat and Responses), anthropic and google-genai are pinned dev dependencies; Bedrock is
botocore's own `bedrock-runtime` client (SigV4 by its signer, verified by the fake, and its
event-stream parser over the binary stream). A wrong key is refused the way each SDK expects.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import botocore.session
import openai
import pytest
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from google import genai
from google.genai import types as gtypes
from openai.types.responses.response import IncompleteDetails

from turnledger.fake_provider import FakeProvider

pytestmark = pytest.mark.timeout(60)

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def test_openai_sdk_streams_chat_and_responses() -> None:
    async with FakeProvider(seed=2) as fp:
        client = openai.AsyncOpenAI(base_url=f"{fp.base_url}/v1", api_key=fp.keys.openai, max_retries=0)
        tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
        async with client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "weather in Oslo?"}], tools=tools
        ) as stream:
            async for _ in stream:
                pass
            chat = await stream.get_final_completion()
        calls = chat.choices[0].message.tool_calls or []
        assert chat.choices[0].finish_reason == "tool_calls" and calls
        assert all(c.function.parsed_arguments is None or c.function.arguments for c in calls)

        rtools: Any = [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": False}]
        async with client.responses.stream(model="gpt-4.1", input="weather in Oslo?", tools=rtools) as rs:
            async for _ in rs:
                pass
            response = await rs.get_final_response()
        assert response.status == "completed" and next(o.type for o in response.output) == "function_call"

        bad = openai.AsyncOpenAI(base_url=f"{fp.base_url}/v1", api_key="sk-wrong-key-000000", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await bad.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


async def test_anthropic_sdk_streams_messages() -> None:
    async with FakeProvider(seed=2) as fp:
        client = anthropic.AsyncAnthropic(base_url=fp.base_url, api_key=fp.keys.anthropic, max_retries=0)
        async with client.messages.stream(
            model="claude-sonnet-4",
            max_tokens=256,
            messages=[{"role": "user", "content": "weather in Oslo?"}],
            tools=[{"name": "get_weather", "input_schema": WEATHER}],
        ) as stream:
            async for _ in stream:
                pass
            message = await stream.get_final_message()
        assert message.stop_reason == "tool_use"
        assert [b.type for b in message.content] == ["tool_use"] * len(message.content)
        assert all(isinstance(b.input, dict) and "city" in b.input for b in message.content)  # type: ignore[union-attr]

        bad = anthropic.AsyncAnthropic(base_url=fp.base_url, api_key="sk-ant-wrong-0000", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError):
            await bad.messages.create(
                model="claude-sonnet-4", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )


async def test_google_genai_sdk_streams_generate_content() -> None:
    async with FakeProvider(seed=2) as fp:
        options = gtypes.HttpOptions(base_url=fp.base_url, api_version="v1beta")
        client = genai.Client(api_key=fp.keys.gemini, http_options=options)
        declaration = gtypes.FunctionDeclaration(name="get_weather", parameters_json_schema=WEATHER)
        config = gtypes.GenerateContentConfig(tools=[gtypes.Tool(function_declarations=[declaration])])
        chunks = [
            chunk
            async for chunk in await client.aio.models.generate_content_stream(
                model="gemini-2.5-pro", contents="weather in Oslo?", config=config
            )
        ]
        assert chunks and chunks[-1].candidates and chunks[-1].candidates[0].finish_reason == "STOP"
        calls = [c for chunk in chunks for c in chunk.function_calls or []]
        assert calls and all(c.name == "get_weather" and "city" in (c.args or {}) for c in calls)
        text = [
            chunk.text
            async for chunk in await client.aio.models.generate_content_stream(
                model="gemini-2.5-pro", contents="tell me something"
            )
        ]
        assert "".join(t or "" for t in text).startswith("About tell me something")

        bad = genai.Client(api_key="AIza-wrong-000000", http_options=options)
        with pytest.raises(genai.errors.ClientError) as refused:
            await bad.aio.models.generate_content(model="gemini-2.5-pro", contents="hi")
        assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"


def _bedrock_client(base_url: str, key_id: str, secret: str) -> Any:
    session = botocore.session.get_session()
    return session.create_client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=base_url,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def _converse_stream(client: Any, text: str, tools: bool) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {
        "modelId": "anthropic.claude-sonnet-4-20250514-v1:0",  # a ':' that must be escaped in the path
        "messages": [{"role": "user", "content": [{"text": text}]}],
    }
    if tools:
        spec = {"name": "get_weather", "inputSchema": {"json": WEATHER}}
        kwargs["toolConfig"] = {"tools": [{"toolSpec": spec}]}
    response = client.converse_stream(**kwargs)
    return list(response["stream"])


async def test_botocore_bedrock_runtime_client_streams_converse() -> None:
    async with FakeProvider(seed=2) as fp:
        client = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)
        events = await asyncio.to_thread(_converse_stream, client, "weather in Oslo?", True)
        kinds = [next(iter(e)) for e in events]
        assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
        assert events[-2]["messageStop"]["stopReason"] == "tool_use"
        starts = [e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e]
        assert starts and all(s["name"] == "get_weather" for s in starts)
        text_events = await asyncio.to_thread(_converse_stream, client, "tell me something", False)
        text = "".join(
            e["contentBlockDelta"]["delta"]["text"] for e in text_events if "contentBlockDelta" in e
        )
        assert text.startswith("About tell me something")
        assert fp.auth_failures == []

        wrong = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, "not-the-secret-0000")
        with pytest.raises(wrong.exceptions.ClientError) as refused:
            await asyncio.to_thread(_converse_stream, wrong, "hi", False)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


async def test_botocore_event_stream_parser_takes_every_byte_of_the_raw_stream() -> None:
    import httpx

    from turnledger.gateway.endpoints import endpoints_for
    from turnledger.gateway.provider_request import ProviderRequest, authenticate

    async with FakeProvider(seed=2) as fp:
        endpoint = endpoints_for(fp.base_url, fp.keys.as_env()).endpoint(
            "bedrock-converse@1", "bedrock/anthropic.claude-sonnet-4@2025-05"
        )
        body = b'{"messages":[{"role":"user","content":[{"text":"tell me something"}]}]}'
        request = authenticate(endpoint, ProviderRequest("POST", endpoint.url, endpoint.headers, body))
        async with httpx.AsyncClient() as http:
            response = await http.post(request.url, content=request.content, headers=dict(request.headers))
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
        buffer = EventStreamBuffer()
        buffer.add_data(response.content)
        messages = list(buffer)
        consumed = sum(m.prelude.total_length for m in messages)
        assert consumed == len(response.content)
        assert next(m.headers[":event-type"] for m in messages) == "messageStart"


async def test_every_sdk_reads_the_fakes_refusals_as_the_apis_own() -> None:
    """`rate_limited` and `http_status` answers: each SDK raises its own class for them, and the
    Stainless SDKs read the delay the fake names (anthropic and openai compute their wait from it)."""
    throttled = {"x-fake-fault": "rate_limited=2500"}
    async with FakeProvider(seed=2) as fp:
        claude = anthropic.AsyncAnthropic(
            base_url=fp.base_url, api_key=fp.keys.anthropic, max_retries=0, default_headers=throttled
        )
        with pytest.raises(anthropic.RateLimitError) as limited:
            await claude.messages.create(
                model="c", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert limited.value.response.headers["retry-after-ms"] == "2500"
        assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        overloaded = anthropic.AsyncAnthropic(
            base_url=fp.base_url,
            api_key=fp.keys.anthropic,
            max_retries=0,
            default_headers={"x-fake-fault": "http_status=529"},
        )
        with pytest.raises(anthropic.InternalServerError) as busy:
            await overloaded.messages.create(
                model="c", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert busy.value.status_code == 529
        assert busy.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]

        gpt = openai.AsyncOpenAI(
            base_url=f"{fp.base_url}/v1", api_key=fp.keys.openai, max_retries=0, default_headers=throttled
        )
        with pytest.raises(openai.RateLimitError) as slow:
            await gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert slow.value.code == "rate_limit_exceeded" and slow.value.type == "requests"
        assert slow.value.response.headers["retry-after"] == "2.5"
        gone = openai.AsyncOpenAI(
            base_url=f"{fp.base_url}/v1",
            api_key=fp.keys.openai,
            max_retries=0,
            default_headers={"x-fake-fault": "http_status=404"},
        )
        with pytest.raises(openai.NotFoundError) as missing:
            await gone.responses.create(model="gpt-4.1", input="hi")
        assert missing.value.code == "model_not_found"

        options = gtypes.HttpOptions(base_url=fp.base_url, api_version="v1beta", headers=throttled)
        gemini = genai.Client(api_key=fp.keys.gemini, http_options=options)
        with pytest.raises(genai.errors.ClientError) as exhausted:
            await gemini.aio.models.generate_content(model="gemini-2.5-pro", contents="hi")
        assert exhausted.value.code == 429 and exhausted.value.status == "RESOURCE_EXHAUSTED"
        [retry_info] = exhausted.value.details["error"]["details"]
        assert retry_info == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}

        bedrock = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)

        def add_fault(request: Any, **_: Any) -> None:
            request.headers["x-fake-fault"] = "rate_limited=2500"

        bedrock.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_fault)
        with pytest.raises(bedrock.exceptions.ThrottlingException) as refused:
            await asyncio.to_thread(_converse_stream, bedrock, "hi", False)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429


async def test_every_sdk_reads_the_refusal_stop_as_its_apis_own() -> None:
    """`refusal_after=2`: each client meets the refusal as it meets the real one: anthropic's
    `stop_reason`, openai's `ContentFilterFinishReasonError` (Chat) and `response.incomplete` (Responses;
    its stream helper has no final response without `response.completed`), google-genai's
    `FinishReason.SAFETY`, botocore's `messageStop`."""
    refuse = {"x-fake-fault": "refusal_after=2"}
    async with FakeProvider(seed=2) as fp:
        claude = anthropic.AsyncAnthropic(
            base_url=fp.base_url, api_key=fp.keys.anthropic, max_retries=0, default_headers=refuse
        )
        async with claude.messages.stream(
            model="claude-sonnet-4", max_tokens=64, messages=[{"role": "user", "content": "tell me"}]
        ) as stream:
            async for _ in stream:
                pass
            message = await stream.get_final_message()
        assert message.stop_reason == "refusal"
        assert [(b.type, b.text) for b in message.content] == [("text", "About tell")]  # type: ignore[union-attr]

        gpt = openai.AsyncOpenAI(
            base_url=f"{fp.base_url}/v1", api_key=fp.keys.openai, max_retries=0, default_headers=refuse
        )
        with pytest.raises(openai.ContentFilterFinishReasonError):
            async with gpt.chat.completions.stream(
                model="gpt-4o", messages=[{"role": "user", "content": "tell me"}]
            ) as chat:
                async for _ in chat:
                    pass
                await chat.get_final_completion()
        async with gpt.responses.stream(model="gpt-4.1", input="tell me") as responses:
            events = [event async for event in responses]
        last = events[-1]
        assert last.type == "response.incomplete"
        assert (last.response.status, last.response.incomplete_details) == (
            "incomplete",
            IncompleteDetails(reason="content_filter"),
        )
        assert last.response.output_text == "About tell"

        options = gtypes.HttpOptions(base_url=fp.base_url, api_version="v1beta", headers=refuse)
        gemini = genai.Client(api_key=fp.keys.gemini, http_options=options)
        chunks = [
            chunk
            async for chunk in await gemini.aio.models.generate_content_stream(
                model="gemini-2.5-pro", contents="tell me"
            )
        ]
        assert [chunk.candidates[0].finish_reason for chunk in chunks if chunk.candidates] == [None] * (
            len(chunks) - 1
        ) + [gtypes.FinishReason.SAFETY]
        assert "".join(chunk.text or "" for chunk in chunks[:-1]) == "About tell"

        bedrock = _bedrock_client(fp.base_url, fp.keys.aws_access_key_id, fp.keys.aws_secret_access_key)

        def add_fault(request: Any, **_: Any) -> None:
            request.headers["x-fake-fault"] = "refusal_after=2"

        bedrock.meta.events.register("before-sign.bedrock-runtime.ConverseStream", add_fault)
        converse = await asyncio.to_thread(_converse_stream, bedrock, "tell me", False)
        assert [next(iter(e)) for e in converse][-3:] == ["contentBlockStop", "messageStop", "metadata"]
        assert converse[-2]["messageStop"]["stopReason"] == "guardrail_intervened"
        text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in converse if "contentBlockDelta" in e)
        assert text == "About tell"
