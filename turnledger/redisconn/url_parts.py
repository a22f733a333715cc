"""A REDIS_URL split into its parts, alike on every CPython release, or a `RedisSettingsError`.

A Sentinel URL names several sentinels in its netloc, IPv6 literals among them
(`redis+sentinel://s1:26379,[::1]:26380/mymaster`), which is no URL's netloc: CPython's `urlsplit`
refuses a bracket that does not open the host part since its 2025 security releases (3.11.12,
3.12.9, 3.13.2; Debian backports it to its 3.11.2), with a bare `ValueError` ("Invalid IPv6 URL"),
where earlier releases passed it. So a Sentinel URL's netloc is cut out before `urlsplit` reads the
rest and put back as written; `sentinel.parse` splits it into addresses itself. Any URL `urlsplit`
refuses (`redis://[::1`) is a `RedisSettingsError`, which the commands say in one line.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from turnledger.errors import RedisSettingsError

MULTI_HOST_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
"""The schemes whose netloc lists several HOST:PORT."""


def split_url(url: str) -> SplitResult:
    """`urlsplit(url)`, a Sentinel URL's netloc as written (module docstring)."""
    scheme, separator, rest = url.partition("://")
    try:
        if separator and scheme.lower() in MULTI_HOST_SCHEMES:
            end = min((at for at in map(rest.find, "/?#") if at >= 0), default=len(rest))
            return urlsplit(f"{scheme}://sentinels{rest[end:]}")._replace(netloc=rest[:end])
        return urlsplit(url)
    except ValueError as exc:  # the URL is not echoed: it may hold a password
        raise RedisSettingsError(f"REDIS_URL (or --redis-url) is no URL this Python reads: {exc}") from None
