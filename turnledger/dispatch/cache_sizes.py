"""The engine's default cache sizes, apart so that the CLI can name them without importing the engine."""

from __future__ import annotations

STATE_CACHE_SIZE = 10_000
"""Decoded states an engine keeps (one engine per partition); `turnledger process` reads
TURNLEDGER_STATE_CACHE_SIZE (processors/state_cache_config.py). A miss reads the state back from the
store and decodes it, with the same outputs. The size trades memory for CPU (issue 20, measured):
each cached conversation costs ~9 KB even when small (the decoded models and the JSON of its
changelog parts; ~20 KB before equal fields-sets, tools and names were shared and the bytes of
each value no longer kept beside their JSON, ~10 KB before a request's JSON was kept once), so
100k conversations on two partitions peaked at 450 MB with 10,000 per engine and 291 MB with 2,000
(`bench_dispatch --rss 100000:sqlite[:N]`, against 649 and 326 at f43601c in the same session;
373 MB with 10,000 in session 43, 188 MB with none); but an
engine whose active conversations outnumber its cache re-decodes nearly every event: 5,000
conversations interleaved in one engine cost 1,875 µs/event with 2,000 against 577 with 10,000
(`bench_dispatch_engine --conversations 5000 --concurrency 5000`)."""
