"""`host_names.is_host_name`: every DNS name and IPv4 address is kept; an all-numeric name that is no
IPv4 address (`10.0.0.300`) is refused, for the Kafka bootstrap and the Redis URL alike. glibc's resolver
answers it with EAI_NONAME (checked below), or, for `inet_aton`'s shorthands, with an address nobody
wrote."""

from __future__ import annotations

import socket

import pytest
import typer

from turnledger import cli_checks
from turnledger.errors import RedisSettingsError
from turnledger.host_names import is_host_name
from turnledger.redisconn.settings import client_options

KEPT = [
    "k",
    "k8s",
    "kafka-0.kafka.svc.cluster.local",
    "k_1",
    "k.",
    "1a.2",
    "0x7f.1",
    "3com.com",
    "bücher.example",
    "k" * 63,
    "10.0.0.1",
    "0.0.0.0",
    "255.255.255.255",
    "127.0.0.1",
]
NUMERIC_NO_ADDRESS = ["10.0.0.300", "10.0.0.256", "1.2.3.4.5", "1.2.3.4.", "127.1", "010.0.0.1", "9092"]


@pytest.mark.parametrize("host", KEPT)
def test_names_and_ipv4_addresses_are_kept(host: str) -> None:
    assert is_host_name(host)


@pytest.mark.parametrize("host", NUMERIC_NO_ADDRESS)
def test_an_all_numeric_name_that_is_no_ipv4_address_is_refused(host: str) -> None:
    assert not is_host_name(host)


@pytest.mark.parametrize("host", ["10.0.0.300", "1.2.3.4.5"])
def test_the_resolver_finds_no_address_for_them(host: str) -> None:
    """What the resolver does with them without the check: no address, however long one waits."""
    with pytest.raises(socket.gaierror) as caught:
        socket.getaddrinfo(host, 9092, type=socket.SOCK_STREAM)
    assert caught.value.errno == socket.EAI_NONAME


@pytest.mark.parametrize(
    ("bootstrap", "entry"), [("10.0.0.300:9092", "10.0.0.300:9092"), ("k:1,9092", "9092")]
)
def test_the_bootstrap_check_refuses_them(bootstrap: str, entry: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.bootstrap(bootstrap)
    assert str(caught.value) == (
        f"{entry!r} in {bootstrap!r}: expected host:port[,host:port], each host a host name or IP address "
        "(no scheme, user or path)"
    )


@pytest.mark.parametrize(
    "bootstrap", ["10.0.0.1:9092", "[::1]:9092", "::1", "[fe80::1%lo]:9092", "k.example:9092,10.0.0.2:1"]
)
def test_the_bootstrap_check_keeps_addresses_and_ipv6_literals(bootstrap: str) -> None:
    assert cli_checks.bootstrap(bootstrap) == bootstrap


def test_the_redis_url_check_refuses_them() -> None:
    url = "redis://10.0.0.300:6379/0"
    with pytest.raises(RedisSettingsError) as caught:
        client_options(url, {})
    assert str(caught.value) == f"REDIS_URL {url!r}: '10.0.0.300' is no host name or IP address"


@pytest.mark.parametrize("url", ["redis://10.0.0.1:6379/0", "redis://[::1]:6379/0", "redis://k.example/0"])
def test_the_redis_url_check_keeps_addresses_and_ipv6_literals(url: str) -> None:
    client_options(url, {})
