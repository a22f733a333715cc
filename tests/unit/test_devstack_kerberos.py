"""The devstack's Kerberos pieces (devstack/kerberos.py) and the extra listener they give a broker
(devstack/kafka.py's ExtraListener): configuration text only, no KDC and no broker. The realm and
logins on real parts: tests/integration/test_kerberos_listener.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from turnledger.devstack import kafka, procs
from turnledger.devstack.errors import PortInUse
from turnledger.devstack.kerberos import Kdc, KerberosToolsMissing, client_config, kdc_config
from turnledger.devstack.tls import BrokerTls


def test_the_kerberos_listener_is_one_more_sasl_plaintext_listener_with_gssapi_only(tmp_path: Path) -> None:
    kdc = Kdc(tmp_path / "kdc", realm="EXAMPLE.TEST")
    listener = kdc.kafka_listener("KERBEROS", 19097, tmp_path / "kafka.keytab")
    assert listener.bootstrap == "127.0.0.1:19097"
    assert listener.jvm_options == (f"-Djava.security.krb5.conf={tmp_path / 'kdc' / 'krb5.conf'}",)
    material = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    props = kafka.render_config(
        tmp_path / "kafka", 19092, 19093, 19094, "sasl-secret", material, extra=[listener]
    )
    lines = props.read_text().splitlines()
    ports = (
        "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,SASL_SSL://127.0.0.1:19094,"
        "KERBEROS://127.0.0.1:19097"
    )
    assert f"listeners={ports}" in lines and f"advertised.listeners={ports}" in lines
    assert (
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,"
        "KERBEROS:SASL_PLAINTEXT" in lines
    )
    assert [line for line in lines if line.startswith("listener.name.kerberos.")] == [
        "listener.name.kerberos.sasl.enabled.mechanisms=GSSAPI",
        "listener.name.kerberos.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule "
        f'required useKeyTab=true storeKey=true keyTab="{tmp_path / "kafka.keytab"}" '
        'principal="kafka/127.0.0.1@EXAMPLE.TEST" serviceName="kafka";',
    ]


def test_without_extra_listeners_the_broker_config_is_the_devstacks_own(tmp_path: Path) -> None:
    material = BrokerTls(tmp_path / "tls" / "ca.pem", tmp_path / "tls" / "broker.p12", "store-secret")
    settings = [
        line
        for line in kafka.render_config(tmp_path / "kafka", 19092, 19093, 19094, "s", material)
        .read_text()
        .splitlines()
        if line and not line.startswith("#")
    ]
    assert [line for line in settings if "KERBEROS" in line or "kerberos" in line or "GSSAPI" in line] == []
    assert "$" not in "".join(settings)


def test_the_realm_is_found_by_address_over_tcp_and_never_through_dns(tmp_path: Path) -> None:
    assert client_config("EXAMPLE.TEST", 18888).splitlines() == [
        "[libdefaults]",
        "  default_realm = EXAMPLE.TEST",
        "  dns_lookup_realm = false",
        "  dns_lookup_kdc = false",
        "  dns_canonicalize_hostname = false",
        "  rdns = false",
        "  udp_preference_limit = 1",
        "  max_retries = 1",
        "[realms]",
        "  EXAMPLE.TEST = {",
        "    kdc = 127.0.0.1:18888",
        "  }",
    ]
    assert kdc_config("EXAMPLE.TEST", 18888, tmp_path).splitlines() == [
        "[kdcdefaults]",
        '  kdc_listen = ""',  # no UDP port: only the TCP one we picked free
        "  kdc_tcp_listen = 127.0.0.1:18888",
        "[realms]",
        "  EXAMPLE.TEST = {",
        f"    database_name = {tmp_path / 'principal'}",
        f"    key_stash_file = {tmp_path / 'stash'}",
        f"    acl_file = {tmp_path / 'kadm5.acl'}",
        "  }",
        "[logging]",
        f"  kdc = FILE:{tmp_path / 'kdc.log'}",
    ]


def test_a_client_of_the_realm_is_told_by_mit_krb5s_own_variables(tmp_path: Path) -> None:
    kdc = Kdc(tmp_path / "kdc")
    assert kdc.client_env(tmp_path / "svc.keytab", tmp_path / "cc") == {
        "KRB5_CONFIG": str(tmp_path / "kdc" / "krb5.conf"),
        "KRB5_CLIENT_KTNAME": f"FILE:{tmp_path / 'svc.keytab'}",
        "KRB5CCNAME": f"FILE:{tmp_path / 'cc'}",
    }
    assert kdc.principal("svc") == "svc@TURNLEDGER.TEST"


def test_missing_kdc_tools_say_which_package_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("turnledger.devstack.kerberos.tool", lambda name: None)
    with pytest.raises(KerberosToolsMissing) as missing:
        Kdc(tmp_path / "kdc").start()
    assert str(missing.value) == (
        "MIT Kerberos's krb5kdc, kdb5_util, kadmin.local not found: install them "
        "(apt-get install -y krb5-kdc krb5-admin-server; `make setup` does as root)."
    )


def test_an_extra_listener_on_a_port_in_use_is_refused_before_anything_starts(
    tmp_path: Path, bound_port: int
) -> None:
    listener = kafka.ExtraListener("KERBEROS", "SASL_PLAINTEXT", bound_port, ())
    jars = kafka.KafkaJars("0", tmp_path)
    with pytest.raises(PortInUse) as taken:
        kafka.start_kafka(jars, tmp_path / "kafka", tmp_path / "kafka.pid", extra_listeners=[listener])
    assert str(bound_port) in str(taken.value) and "KERBEROS" in str(taken.value)
    assert not (tmp_path / "kafka").exists()


def test_a_detached_child_gets_the_environment_it_is_given_on_top_of_ours(tmp_path: Path) -> None:
    out = tmp_path / "env.log"
    script = "import os; print(os.environ['ONLY_FOR_CHILD'], os.environ['PATH'] == os.environ['PARENT_PATH'])"
    pid = procs.spawn_detached(
        [sys.executable, "-c", script],
        out,
        tmp_path / "child.pid",
        env={"ONLY_FOR_CHILD": "given", "PARENT_PATH": os.environ["PATH"]},
    )
    # waited for by polling, not os.waitpid: a Popen made in another thread of this process may reap the
    # child first (subprocess's cleanup of finished children), and waitpid then raises ChildProcessError
    deadline = time.monotonic() + 60
    while procs.is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not procs.is_alive(pid)
    assert out.read_text() == "given True\n"
    assert "ONLY_FOR_CHILD" not in os.environ
