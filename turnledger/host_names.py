"""What a host in a setting must be for the resolver to look it up: an IP address or a DNS name.

aiokafka and redis-py take any text for a host and hand it to `getaddrinfo` when they connect. A label
the `idna` codec cannot encode (empty, `a..b`, or longer than 63) raised a `UnicodeError` out of the
connect (a traceback, exit 1); anything else no resolver finds (`PLAINTEXT://k`, `user:pw@k`, `k 9092`,
`10.0.0.300`) was an outage waited out for ever. The settings are checked against this before anything
connects.
"""

from __future__ import annotations

import ipaddress
import re

HOST_NAME = re.compile(r"(?=.{1,253}\.?$)[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?")
"""A host name in its ASCII form: dot-separated labels of 1 to 63 letters, digits, `-` or `_`, at most
253 characters."""

ALL_NUMERIC = re.compile(r"[0-9]+(\.[0-9]+)*\.?")
"""A name of digits and dots only: no DNS name (no top-level domain is all digits, RFC 3696 section 2;
RFC 1123 section 2.1 relies on it to tell names from addresses), so it stands for an IPv4 address or for
nothing. glibc's resolver reads one that `inet_aton` takes as such (`127.1` is 127.0.0.1, `010.0.0.1`
is 8.0.0.1, in octal, `9092` is 0.0.35.132) and answers any other (`10.0.0.300`, `1.2.3.4.5`) with
EAI_NONAME, "Name or service not known"."""


def is_host_name(host: str) -> bool:
    """`host` can be looked up: `k1`, `kafka-0.kafka.svc`, `10.0.0.1`, an internationalized name. An
    all-numeric one must be an IPv4 address as written everywhere, four decimal numbers from 0 to 255
    without leading zeros: `inet_aton`'s shorthands (`127.1`, a bare port `9092`) and octal (`010.0.0.1`)
    reach an address nobody meant, anything else reaches none."""
    try:
        ascii_form = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    if ALL_NUMERIC.fullmatch(ascii_form):
        return _is_ipv4_address(ascii_form)
    return HOST_NAME.fullmatch(ascii_form) is not None


def _is_ipv4_address(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True
