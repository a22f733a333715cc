"""What a host in a setting must be for the resolver to look it up: an IP address or a DNS name.

aiokafka and redis-py take any text for a host and hand it to `getaddrinfo` when they connect. A label
the `idna` codec cannot encode (empty, `a..b`, or longer than 63) raised a `UnicodeError` out of the
connect (a traceback, exit 1); anything else no resolver finds (`PLAINTEXT://k`, `user:pw@k`, `k 9092`)
was an outage waited out for ever. The settings are checked against this before anything connects.
"""

from __future__ import annotations

import re

HOST_NAME = re.compile(r"(?=.{1,253}\.?$)[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?")
"""A host name in its ASCII form: dot-separated labels of 1 to 63 letters, digits, `-` or `_`, at most
253 characters (an IPv4 address is one too)."""


def is_host_name(host: str) -> bool:
    """`host` can be looked up: `k1`, `kafka-0.kafka.svc`, `10.0.0.1`, an internationalized name."""
    try:
        ascii_form = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return HOST_NAME.fullmatch(ascii_form) is not None
