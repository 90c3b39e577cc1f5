"""The async-apply benchmark on a small cluster: its last line is JSON holding every figure,
each background figure next to its classic twin."""

from __future__ import annotations

import json

from bench import async_apply as bench

FIGURES = ("apply_us_per_entry_10k_peers", "entry_wait_s_behind_allocation")


def test_last_line_holds_each_figure_and_its_classic_twin(monkeypatch, capsys):
    argv = ["async_apply.py", "--groups", "20", "--vpeers", "2", "--round", "6", "--quick"]
    monkeypatch.setattr("sys.argv", argv)
    bench.main()
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["peers"] == 40
    assert figures["entries"] == 12
    for name in FIGURES:
        assert figures[name] > 0
        assert figures[f"{name}_classic"] > 0
    assert figures["allocation_s_10k_peers"] > 0


def test_rounds_replace_a_peer_then_join_cheaply():
    replica = bench.cluster(4, 2, 1)
    log = bench.rounds(replica, 2, 6)
    assert [e.fn for e in log[:6]] == [
        "leave-cluster", "add-virtual-peer", "prepare-join-cluster", "abort-join-cluster",
        "prepare-join-cluster", "abort-join-cluster",
    ]  # fmt: skip
    assert [e.position for e in log] == list(range(replica.version + 1, replica.version + 13))
