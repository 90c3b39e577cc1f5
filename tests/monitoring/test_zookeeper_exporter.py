"""The zookeeper role's exporter: mntr's answer parsed into metrics (unit and property tests), and
the script itself, run as the role runs it, scraped while its ZooKeeper serves and after it dies."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.support import (
    ZOOKEEPER_EXPORTER,
    ZooKeeperServer,
    free_port,
    wait_for,
    zookeeper_exporter,
)

exporter = zookeeper_exporter()

VERSION = "3.9.3-${mvngit.commit.id}, built on 2025-01-01 00:00 UTC"
ANSWER = (
    f"zk_version\t{VERSION}\n"
    "zk_server_state\tfollower\n"
    "zk_znode_count\t42\n"
    "zk_avg_latency\t0.5\n"
    "zk_outstanding_requests\t0\n"
    "zk_packets_received\t7\n"
    "zk_avg_fsynctime\t4.0\n"
    "zk_cnt_fsynctime\t3\n"
    "zk_sum_fsynctime\t12\n"
    "zk_p99_fsynctime\t9\n"
)


def samples(families) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }


def test_a_serving_member_gives_its_state_version_and_figures():
    got = samples(exporter.families(exporter.parse_mntr(ANSWER)))
    assert got == {
        ("zookeeper_up", ()): 1,
        ("zookeeper_server_state", (("state", "follower"),)): 1,
        ("zookeeper_build_info", (("version", VERSION),)): 1,
        ("zookeeper_znode_count", ()): 42,
        ("zookeeper_avg_latency", ()): 0.5,
        ("zookeeper_outstanding_requests", ()): 0,
        ("zookeeper_packets_received_total", ()): 7,
        ("zookeeper_avg_fsynctime", ()): 4,
        ("zookeeper_fsynctime_count", ()): 3,
        ("zookeeper_fsynctime_sum", ()): 12,
        ("zookeeper_fsynctime", (("quantile", "0.99"),)): 9,
    }  # fmt: skip


def test_cumulative_counts_are_counters_and_summaries_the_rest_gauges():
    types = {f.name: f.type for f in exporter.families(exporter.parse_mntr(ANSWER))}
    assert types == {
        "zookeeper_up": "gauge", "zookeeper_server_state": "gauge", "zookeeper_build": "info",
        "zookeeper_znode_count": "gauge", "zookeeper_avg_latency": "gauge",
        "zookeeper_outstanding_requests": "gauge", "zookeeper_packets_received": "counter",
        "zookeeper_avg_fsynctime": "gauge", "zookeeper_fsynctime": "summary",
    }  # fmt: skip


@pytest.mark.parametrize(
    "answer",
    [
        "This ZooKeeper instance is not currently serving requests\n",
        "mntr is not executed because it is not in the whitelist.\n",
        "",
    ],
)
def test_a_member_that_does_not_serve_is_down(answer):
    assert samples(exporter.families(exporter.parse_mntr(answer))) == {("zookeeper_up", ()): 0}


KEYS = st.one_of(
    st.from_regex(r"zk_[a-z][a-z0-9_.-]{0,20}", fullmatch=True),
    st.sampled_from(sorted(exporter.COUNTERS)).map("zk_{}".format),
    st.tuples(
        st.sampled_from(["avg", "min", "max", "cnt", "sum", "p50", "p999"]),
        st.sampled_from(["fsynctime", "x_y", "packets_sent"]),
    ).map("zk_{0[0]}_{0[1]}".format),
).filter(lambda k: k not in (exporter.STATE, exporter.VERSION))
VALUES = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(st.characters(categories=["L"]), min_size=1, max_size=5),
)


def served_names(family) -> set[str]:
    return {family.name} | {s.name for s in family.samples}


@given(st.dictionaries(KEYS, VALUES, max_size=30))
def test_every_numeric_key_is_served_once_under_a_valid_unique_name(pairs):
    answer = "".join(f"{k}\t{v}\n" for k, v in pairs.items())
    assert exporter.parse_mntr(answer) == pairs
    families = list(exporter.families(pairs))
    assert families[0].name == "zookeeper_up"
    assert families[0].samples[0].value == int(bool(pairs))
    names = [n for f in families for n in served_names(f)]
    assert len(names) == len(set(names)), "two metrics serve one name"
    assert all(exporter._UNSAFE.search(n) is None and n.startswith("zookeeper_") for n in names)
    numeric = {
        exporter._UNSAFE.sub("_", k[3:])
        for k, v in pairs.items()
        if exporter._number(v) is not None
    }
    covered = set()
    for family in families[1:]:
        base = family.name.removeprefix("zookeeper_")
        if family.type in ("gauge", "counter") and base not in exporter.RESERVED:
            assert (family.type == "counter") == (base in exporter.COUNTERS), family.name
        if family.type == "summary":
            covered |= {f"{part}_{base}" for part in ("cnt", "sum", "p50", "p999")} & numeric
            assert {f"cnt_{base}", f"sum_{base}"} <= numeric
        elif family.type in ("gauge", "counter"):
            covered.add(base)
    assert covered <= numeric
    # A numeric key not served is a summary's part, or its name was another metric's already.
    for name in numeric - covered - exporter.RESERVED:
        clash = {f"zookeeper_{name}", f"zookeeper_{name}_total"} & set(names)
        in_summary = any(
            f.type == "summary" and name.endswith("_" + f.name.removeprefix("zookeeper_"))
            for f in families
        )
        assert clash or in_summary, f"{name} is not served"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return samples(text_string_to_metric_families(response.read().decode()))


@pytest.fixture
def server() -> Iterator[ZooKeeperServer]:
    """A server of its own: the test kills it."""
    server = ZooKeeperServer().start()
    yield server
    server.stop()


@pytest.mark.integration
def test_the_script_serves_a_real_servers_mntr_and_reports_it_gone(server, tmp_path):
    port = free_port()
    log = tmp_path / "exporter.log"
    process = subprocess.Popen(
        [sys.executable, str(ZOOKEEPER_EXPORTER), "--server", server.address,
         "--listen", f"127.0.0.1:{port}", "--timeout", "2"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    try:

        def serving() -> dict | None:
            try:
                got = scrape(port)
            except OSError:
                return None
            return got if got.get(("zookeeper_up", ())) == 1 else None

        got = wait_for(serving, 30, "the exporter to report a serving ZooKeeper")
        assert got[("zookeeper_server_state", (("state", "standalone"),))] == 1
        assert got[("zookeeper_znode_count", ())] >= 1
        assert got[("zookeeper_packets_received_total", ())] >= 1
        assert got[("zookeeper_fsynctime_count", ())] >= 0
        assert any(name == "zookeeper_build_info" for name, _ in got)
        assert len(got) > 20, sorted(got)

        server.process.kill()
        server.process.wait()
        got = scrape(port)
        assert got == {("zookeeper_up", ()): 0}
        assert f"{server.address} is unreachable" in log.read_text()
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--server", "nohost"], "argument --server: 'nohost' is not HOST:PORT"),
        (["--listen", "127.0.0.1:70000"], "argument --listen: '127.0.0.1:70000' is not HOST:PORT"),
    ],
)
def test_a_bad_address_is_named(arguments, expected):
    result = subprocess.run(
        [sys.executable, str(ZOOKEEPER_EXPORTER), *arguments],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(expected)


def test_a_port_in_use_is_named():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, str(ZOOKEEPER_EXPORTER), "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"cannot serve metrics on 127.0.0.1:{port}: [Errno 98] Address already in use"
    )
