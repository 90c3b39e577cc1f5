"""Key versions: stamped with the position of the entry that changed each key, kept through the
replica's JSON form, and absent (never changed) in documents written before they were kept."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from peer.log.apply import apply_entry
from peer.log.entries.join import PREPARE_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.replica import EMPTY_VERSION, KEYS, Replica
from tests.unit.log.random_logs import random_logs, replay


def test_each_entry_stamps_the_keys_it_changed_and_no_other():
    joined = apply_entry(Replica(), PREPARE_JOIN.entry(joiner="g0").at(4)).new
    assert joined.key_version("groups") == 4
    assert joined.key_version("group_peers") == EMPTY_VERSION
    added = apply_entry(joined, ADD_VIRTUAL_PEER.entry(id="p", group="g0").at(9)).new
    assert added.key_version("group_peers") == 9
    assert added.key_version("short_ids") == 9
    assert added.key_version("groups") == 4
    again = apply_entry(added, ADD_VIRTUAL_PEER.entry(id="p", group="g0").at(12)).new
    assert again.key_version("group_peers") == 9, "an entry that changed nothing stamps nothing"


@settings(max_examples=50, deadline=None)
@given(random_logs())
def test_key_versions_survive_the_json_form(log):
    replica = replay(log)[-1]
    back = Replica.from_json(json.loads(json.dumps(replica.to_json())))
    assert {k: back.key_version(k) for k in KEYS} == {k: replica.key_version(k) for k in KEYS}
    assert all(replica.key_version(k) <= replica.version for k in KEYS)


def test_a_document_without_key_versions_has_none():
    doc = Replica(version=3).to_json()
    del doc["key_versions"]
    assert Replica.from_json(doc).key_version("jobs") == EMPTY_VERSION


def test_key_versions_naming_no_key_are_refused():
    doc = {**Replica().to_json(), "key_versions": {"jobs": 1, "nonsense": 2}}
    with pytest.raises(ValueError, match=r"key_versions names unknown keys: \['nonsense'\]"):
        Replica.from_json(doc)
