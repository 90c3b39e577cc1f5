"""The ZooKeeper hosts a client is given name each server often enough that a handshake a
half-started server holds lasts about HANDSHAKE_S, not the whole session."""

from __future__ import annotations

from kazoo.hosts import collect_hosts

from peer.log.stores.zookeeper import HANDSHAKE_S, handshaking


def test_a_lone_server_is_named_for_a_short_handshake_and_the_chroot_kept():
    hosts, chroot = collect_hosts(handshaking("zk:2181/onyx", 40.0))
    assert set(hosts) == {("zk", 2181)}
    assert 40.0 / len(hosts) <= HANDSHAKE_S
    assert chroot == "/onyx"


def test_an_ensemble_s_servers_each_come_as_often():
    hosts, chroot = collect_hosts(handshaking("a:1,b:2,c:3", 10.0))
    assert sorted(set(hosts)) == [("a", 1), ("b", 2), ("c", 3)]
    assert len(hosts) % 3 == 0
    assert 10.0 / len(hosts) <= HANDSHAKE_S
    assert chroot is None
