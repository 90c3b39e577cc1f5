"""Operator chains: which edges chain, what the chained job names, and that it is a job the
cluster takes as it would any other."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.chains import chain_links, chained
from peer.job.load import load
from peer.job.spec import FlowCondition, Job, JobError, Join, Lifecycle, Task, Window
from peer.job.validate import validate

FNS = "tests.unit.runtime.runtime_fns"


def fn(name: str, **fields) -> Task:
    return Task(name, "function", fn=f"{FNS}:double", **{"n_peers": 1, **fields})


def line(*tasks: Task, **fields) -> Job:
    """The tasks in a line, from an input to an output."""
    catalog = (
        Task("read", "input", plugin=f"{FNS}:slow_to_sync", n_peers=1),
        *tasks,
        Task("write", "output", plugin=f"{FNS}:slow_to_sync"),
    )
    names = [task.name for task in catalog]
    return Job(workflow=tuple(itertools.pairwise(names)), catalog=catalog, **fields)


def names(job: Job) -> list[str]:
    return [task.name for task in job.catalog]


def test_a_line_of_functions_runs_as_one_task_with_its_input():
    job = chained(line(fn("a"), fn("b"), fn("c")))
    assert names(job) == ["read+a+b+c", "write"]
    assert job.workflow == (("read+a+b+c", "write"),)
    head = job.task("read+a+b+c")
    assert (head.kind, head.plugin) == ("input", f"{FNS}:slow_to_sync")
    assert [member.name for member in head.chain] == ["read+a+b+c", "a", "b", "c"]
    assert validate(job) is job


def test_a_task_that_says_chaining_false_stays_a_task_of_its_own():
    job = chained(line(fn("a"), fn("b", chaining=False), fn("c")))
    assert names(job) == ["read+a", "b", "c", "write"]


@pytest.mark.parametrize(
    "b",
    [
        fn("b", group_by_key="word"),  # regroups
        fn("b", n_peers=2),  # other peers
        fn("b", required_tags=("ssd",)),
        fn("b", engine="spark"),  # applied elsewhere
        fn("b", flux_policy="kill"),
    ],
)
def test_an_edge_that_regroups_or_changes_peers_is_not_chained(b):
    assert chain_links(line(fn("a"), b)) == {"read": "a"}


def test_windows_joins_flow_conditions_and_lifecycles_keep_their_tasks():
    base = line(fn("a"), fn("b"))
    windowed = replace(base, windows=(Window("w", "b", "global", "count"),))
    assert chain_links(windowed) == {"read": "a"}
    conditioned = replace(base, flow_conditions=(FlowCondition("a", ("b",), f"{FNS}:always"),))
    assert chain_links(conditioned) == {"read": "a"}
    hooked = replace(base, lifecycles=(Lifecycle("a", before_batch=f"{FNS}:always"),))
    assert chain_links(hooked) == {}
    everywhere = replace(base, lifecycles=(Lifecycle("all", before_batch=f"{FNS}:always"),))
    assert chain_links(everywhere) == {}


def test_a_job_that_recovers_locally_chains_functions_only():
    job = chained(line(fn("a"), fn("b"), local_recovery=True))
    assert names(job) == ["read", "a+b", "write"]


def test_a_fan_out_or_a_fan_in_is_not_chained():
    catalog = (
        Task("read", "input", plugin=f"{FNS}:slow_to_sync", n_peers=1),
        fn("a"),
        fn("b"),
        Task("write", "output", plugin=f"{FNS}:slow_to_sync"),
    )
    edges = (("read", "a"), ("read", "b"), ("a", "write"), ("b", "write"))
    assert chain_links(Job(workflow=edges, catalog=catalog)) == {}


def test_names_elsewhere_in_the_job_follow_the_chain():
    catalog = (
        Task("people", "input", plugin=f"{FNS}:slow_to_sync", n_peers=1),
        fn("p"),
        Task("bids", "input", plugin=f"{FNS}:slow_to_sync", n_peers=1),
        Task("join", "function", n_peers=1),
        fn("after"),
        fn("late"),
        Task("write", "output", plugin=f"{FNS}:slow_to_sync"),
    )
    edges = (("people", "p"), ("p", "join"), ("bids", "join"), ("join", "after"),
             ("join", "late"), ("after", "write"), ("late", "write"))  # fmt: skip
    joins = (Join("j", "join", "window", "p", "bids", "k", "k", "t", "t", range=1.0, late="late"),)
    conditions = (FlowCondition("join", ("after",), f"{FNS}:always"),)
    job = chained(Job(workflow=edges, catalog=catalog, joins=joins, flow_conditions=conditions))
    assert "people+p" in names(job)
    assert job.joins[0].left == "people+p"
    assert validate(job) is job


def test_a_chained_job_reads_back_as_it_was_written_and_chains_no_further():
    job = chained(line(fn("a"), fn("b")))
    again = load(job.to_dict())
    assert again == job
    assert again.digest() == job.digest()
    assert chained(again) == job


def test_a_chain_whose_name_a_task_has_is_not_made():
    job = line(fn("a"), fn("read+a", chaining=False))
    assert chained(job) == job


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (fn("b", group_by_key="k"), "a chained task must be a python or arrow function task"),
        (Task("b", "function", engine="spark", fn=f"{FNS}:double"), "chained task 'b'"),
        (fn("a"), "name is listed twice"),
    ],
)
def test_a_chain_of_what_cannot_chain_is_refused(member, message):
    job = line(fn("a", chained=(member,)))
    with pytest.raises(JobError, match=message):
        validate(job)


def test_only_an_input_or_a_function_runs_a_chain():
    job = line(fn("a"))
    write = replace(job.catalog[-1], chained=(fn("b"),))
    with pytest.raises(JobError, match="chained is for an input or a python or arrow function"):
        validate(replace(job, catalog=(*job.catalog[:-1], write)))


TASKS = st.lists(
    st.tuples(st.booleans(), st.sampled_from([1, 2]), st.booleans()), min_size=1, max_size=7
)
"""Functions in a line: whether each allows chaining, its peers, whether it groups."""


@settings(deadline=None)
@given(TASKS)
def test_every_chain_keeps_its_tasks_in_order_and_chains_only_what_may(tasks):
    fns = [
        fn(f"f{i}", chaining=chaining, n_peers=peers, group_by_key="k" if grouped else None)
        for i, (chaining, peers, grouped) in enumerate(tasks)
    ]
    job = line(*fns)
    result = chained(job)
    validate(result)
    heads = [task.name for task in result.catalog]
    assert [name for head in heads for name in head.split("+")] == names(job)  # each once, in order
    assert chain_links(result) == {}  # chains are as long as they can be
    for task in result.catalog:
        assert [m.name for m in task.chained] == task.name.split("+")[1:]
        for before, after in zip(task.chain, task.chain[1:], strict=False):
            assert after.chaining
            assert not after.keyed
            assert after.n_peers == task.chain[0].n_peers
            assert before.chaining
