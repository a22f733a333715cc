"""An in-memory ledger for worker tests: the real codec and BatchEngine, no Kafka.

`append` encodes the event, folds it at once and routes the decoded outputs to the
subscribers (as tasks, like a consumer would), so the worker and the tool executor
run against the real fold and its exact decisions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from turnledger.codec import encode
from turnledger.dispatch.engine import BatchEngine, EncodedOutput
from turnledger.model.base import Frozen
from turnledger.model.events import IngressEvent
from turnledger.records import SourceRecord
from turnledger.topology import Stream

Subscriber = Callable[[list[Frozen]], Awaitable[None]]


class DictStore(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        del self[key]


class InMemoryLedger:
    def __init__(self) -> None:
        self.engine = BatchEngine()
        self.store = DictStore()
        self.ingress: list[IngressEvent] = []
        self.outputs: list[EncodedOutput] = []
        self.subscribers: dict[Stream, list[Subscriber]] = {}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def subscribe(self, stream: Stream, fn: Subscriber) -> None:
        self.subscribers.setdefault(stream, []).append(fn)

    async def append(self, event: IngressEvent) -> None:
        async with self._lock:
            offset = len(self.ingress)
            self.ingress.append(event)
            record = SourceRecord("ingress", 0, offset, event.conversation_id.encode(), encode(event))
            outs = self.engine.process_batch([record], self.store)
            self.outputs.extend(outs)
        by_stream: dict[Stream, list[Frozen]] = {}
        for out in outs:
            by_stream.setdefault(out.stream, []).append(out.record)
        for stream, records in by_stream.items():
            for fn in self.subscribers.get(stream, []):
                task = asyncio.create_task(fn(records))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def records(self, stream: Stream) -> list[Frozen]:
        return [o.record for o in self.outputs if o.stream == stream]

    def of_type(self, cls: type) -> list:
        return [o.record for o in self.outputs if isinstance(o.record, cls)]
