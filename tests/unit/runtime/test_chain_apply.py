"""A chain's apply part: each fn takes what the one before returned, as separate tasks would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.spec import Task
from peer.runtime.apply import ChainApply, PythonApply, apply_for
from peer.values.columnar import collect

FNS = "tests.unit.runtime.runtime_fns"
FN_NAMES = ("double", "drop_odd", "halve")


def task(name: str, fn: str, **fields) -> Task:
    return Task(name, "function", fn=f"{FNS}:{fn}", **fields)


@settings(deadline=None)
@given(
    st.lists(st.sampled_from(FN_NAMES), min_size=1, max_size=5),
    st.lists(st.integers(0, 100), max_size=20),
)
def test_a_chain_applies_what_its_tasks_would_one_after_the_other(fns, ns):
    batch = [{"n": n} for n in ns]
    head, *rest = [task(f"t{i}", fn) for i, fn in enumerate(fns)]
    chain = apply_for(Task(head.name, "function", fn=head.fn, chained=tuple(rest)))
    separately = batch
    for member in (head, *rest):
        separately = collect(apply_for(member).apply(separately)) if separately else separately
    assert chain.apply(batch) == separately


def test_a_chain_flushes_each_fn_through_the_fns_after_it_and_keeps_each_ones_state():
    chain = apply_for(task("total", "Total", chained=(task("double", "double"),)))
    assert isinstance(chain, ChainApply)
    assert chain.apply([{"n": 2}, {"n": 3}]) == []
    assert chain.flush() == [{"total": 5}, {"total": 5}]
    counted = apply_for(task("a", "Counts", chained=(task("b", "Counts"),)))
    counted.apply([{"word": "x"}, {"word": "y"}])
    snapshot = counted.snapshot()
    assert snapshot == [{"x": 1, "y": 1}, {}]  # Counts returns None: b sees nothing
    again = apply_for(task("a", "Counts", chained=(task("b", "Counts"),)))
    again.restore([snapshot, [{"z": 2}, {"x": 4}]], lambda word: word in "xz")
    assert again.snapshot() == [{"x": 1, "z": 2}, {"x": 4}]
    assert all(isinstance(part, PythonApply) for part in again.parts)
