"""Every mistake in a job is refused with one JobError naming the job, the part and the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from peer.job.load import from_dict
from peer.job.spec import Job, JobError, Task
from peer.job.validate import validate
from tests.unit.job import wordcount

FNS = wordcount.FNS
Doc = dict[str, Any]


def refusal(change: Callable[[Doc], Any]) -> str:
    """The message the word-count job is refused with after ``change``."""
    doc = wordcount.document()
    change(doc)
    with pytest.raises(JobError) as caught:
        from_dict(doc)
    return str(caught.value)


def task(doc: Doc, name: str) -> Doc:
    return next(t for t in doc["catalog"] if t["name"] == name)


def add_edge(doc: Doc, up: str, down: str) -> None:
    doc["workflow"].append([up, down])


def test_fn_that_does_not_import():
    message = refusal(lambda d: task(d, "split").update(fn=f"{FNS}:nope"))
    assert message == (
        f"job 'wc': task 'split': fn '{FNS}:nope' does not import: "
        f"module '{FNS}' has no attribute 'nope'"
    )


def test_plugin_in_a_missing_module():
    message = refusal(lambda d: task(d, "read").update(plugin="no_such_pkg.mod:read"))
    assert message == (
        "job 'wc': task 'read': plugin 'no_such_pkg.mod:read' does not import: "
        "no module named 'no_such_pkg'"
    )


def test_fn_that_is_not_callable():
    message = refusal(lambda d: task(d, "count").update(fn=f"{FNS}.NOT_CALLABLE"))
    assert message == f"job 'wc': task 'count': fn '{FNS}.NOT_CALLABLE' is not callable"


def test_malformed_path():
    message = refusal(lambda d: task(d, "count").update(group_by_key=None, group_by_fn="a b"))
    assert message == (
        "job 'wc': task 'count': group_by_fn 'a b' does not import: "
        "is not 'package.module:attribute' or 'package.module.attribute'"
    )


def test_job_without_id_is_called_job():
    def change(doc: Doc) -> None:
        del doc["id"]
        task(doc, "split")["batch_size"] = "ten"

    assert refusal(change) == "job: task 'split': batch_size must be an int >= 1, got 'ten'"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("batch_size", "ten", "batch_size must be an int >= 1, got 'ten'"),
        ("batch_size", 0, "batch_size must be an int >= 1, got 0"),
        ("batch_size", True, "batch_size must be an int >= 1, got True"),
        ("max_batch_delay", -1, "max_batch_delay must be a number of seconds >= 0, got -1"),
        ("max_batch_delay", "1ms", "max_batch_delay must be a number of seconds >= 0, got '1ms'"),
        ("min_peers", 1.5, "min_peers must be an int >= 1, got 1.5"),
        ("max_peers", "2", "max_peers must be an int >= 1, got '2'"),
        ("required_tags", "ssd", "required_tags must be a list of strings, got 'ssd'"),
        ("group_by_key", 7, "group_by_key must be a string or a list of strings, got 7"),
        ("params", [1], "params must be a mapping with string keys, got [1]"),
        ("fn", 3, "fn must be a dotted path string, got 3"),
    ],
)
def test_wrong_types(field, value, expected):
    assert refusal(lambda d: task(d, "count").update({field: value})) == (
        f"job 'wc': task 'count': {expected}"
    )


def test_unknown_kind_lists_the_allowed():
    assert refusal(lambda d: task(d, "write").update(kind="sink")) == (
        "job 'wc': task 'write': kind 'sink' is not one of 'input', 'function', 'output'"
    )


def test_unknown_flux_policy_lists_the_allowed():
    assert refusal(lambda d: task(d, "count").update(flux_policy="retry")) == (
        "job 'wc': task 'count': flux_policy 'retry' is not one of 'kill', 'continue', 'recover'"
    )


def test_unknown_task_scheduler_lists_the_allowed():
    assert refusal(lambda d: d.update(task_scheduler="random")) == (
        "job 'wc': task_scheduler 'random' is not one of 'balanced', 'percentage', 'colocated'"
    )


def test_unknown_job_key_lists_the_allowed():
    assert refusal(lambda d: d.update(flows=[])) == (
        "job 'wc': unknown key 'flows' (allowed: barrier_period, catalog, causal_depth, "
        "checkpoint_timeout, code, debloat_target, flow_conditions, id, in_flight_budget, joins, "
        "lifecycles, local_recovery, max_parallelism, metadata, name, percentage, resume_from, "
        "standby, state_backend, task_scheduler, tolerable_abandoned_epochs, triggers, windows, "
        "workflow)"
    )


def test_only_an_input_holds_a_batch_back():
    assert refusal(lambda d: task(d, "count").update(max_batch_delay=0.01)) == (
        "job 'wc': task 'count': max_batch_delay is an input's (its batches are made where they "
        "are read, and every later task sends what it made at once), got 0.01 on a function"
    )


def test_unknown_task_key_lists_the_allowed():
    message = refusal(lambda d: task(d, "split").update(batchsize=5))
    assert message.startswith("job 'wc': task 'split': unknown key 'batchsize' (allowed: ")
    assert "batch_size, chained, chaining, engine, event_time_per_second, flux_policy," in message


def test_unknown_lifecycle_and_flow_keys():
    message = refusal(lambda d: d["lifecycles"][0].update(after_all="x:y"))
    assert message == (
        "job 'wc': lifecycle for all tasks: unknown key 'after_all' (allowed: after_batch, "
        "after_task, before_batch, before_task, task)"
    )
    message = refusal(lambda d: d["flow_conditions"][0].update(from_task="split"))
    assert message == (
        "job 'wc': flow condition from 'split': unknown key 'from_task' "
        "(allowed: from, predicate, short_circuit, to)"
    )


def test_missing_required_keys():
    assert refusal(lambda d: d.pop("catalog")) == "job 'wc': missing key 'catalog'"
    assert refusal(lambda d: task(d, "split").pop("kind")) == (
        "job 'wc': task 'split': missing key 'kind'"
    )
    assert refusal(lambda d: d["catalog"][1].pop("name")) == (
        "job 'wc': catalog entry 1: missing key 'name'"
    )


def test_function_task_needs_fn_and_io_tasks_need_plugin():
    assert refusal(lambda d: task(d, "split").pop("fn")) == (
        "job 'wc': task 'split': fn is required for a function task without windows or a join"
    )
    assert refusal(lambda d: task(d, "read").pop("plugin")) == (
        "job 'wc': task 'read': plugin is required for an input task"
    )
    assert refusal(lambda d: task(d, "split").update(plugin=f"{FNS}:read_lines")) == (
        "job 'wc': task 'split': plugin is only for input and output tasks, not a function task"
    )


def test_unknown_task_in_workflow_names_the_edge():
    assert refusal(lambda d: add_edge(d, "count", "store")) == (
        "job 'wc': workflow edge 'count' -> 'store': task 'store' is not in the catalog"
    )


def test_cycle_names_its_tasks_in_order():
    def change(doc: Doc) -> None:
        doc["catalog"].append({"name": "again", "kind": "function", "fn": f"{FNS}:split"})
        add_edge(doc, "count", "again")
        add_edge(doc, "again", "split")

    assert refusal(change) == (
        "job 'wc': workflow has a cycle: 'again' -> 'split' -> 'count' -> 'again'"
    )


def test_input_task_with_incoming_edge():
    assert refusal(lambda d: add_edge(d, "split", "read")) == (
        "job 'wc': task 'read': workflow: an input task cannot have incoming edges, "
        "got 'split' -> 'read'"
    )


def test_output_task_with_outgoing_edge():
    assert refusal(lambda d: add_edge(d, "write", "count")) == (
        "job 'wc': task 'write': workflow: an output task cannot have outgoing edges, "
        "got 'write' -> 'count'"
    )


def test_function_task_without_incoming_or_outgoing_edge():
    def no_outgoing(doc: Doc) -> None:
        doc["workflow"] = [["read", "split"], ["read", "count"], ["count", "write"]]

    assert refusal(no_outgoing) == (
        "job 'wc': task 'split': workflow: a function task needs an outgoing edge, has none"
    )

    def no_incoming(doc: Doc) -> None:
        doc["workflow"] = [["split", "count"], ["read", "count"], ["count", "write"]]

    assert refusal(no_incoming) == (
        "job 'wc': task 'split': workflow: a function task needs an incoming edge, has none"
    )


def test_task_in_no_edge():
    def change(doc: Doc) -> None:
        doc["catalog"].append({"name": "spare", "kind": "output", "plugin": f"{FNS}:print_counts"})

    assert refusal(change) == "job 'wc': task 'spare': workflow: task is in no edge"


def test_duplicate_task_names():
    def change(doc: Doc) -> None:
        doc["catalog"].append({"name": "count", "kind": "function", "fn": f"{FNS}:count"})

    assert refusal(change) == "job 'wc': task 'count': name is listed twice in the catalog"


def test_duplicate_edge():
    assert refusal(lambda d: add_edge(d, "read", "split")) == (
        "job 'wc': workflow edge 'read' -> 'split' is listed twice"
    )


def test_min_peers_above_max_peers():
    assert refusal(lambda d: task(d, "count").update(min_peers=5)) == (
        "job 'wc': task 'count': min_peers 5 is more than max_peers 4"
    )


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ({"min_peers": 1}, "n_peers 2 conflicts with min_peers 1"),
        ({"min_peers": 3}, "n_peers 2 conflicts with min_peers 3"),
        ({"max_peers": 4}, "n_peers 2 conflicts with max_peers 4"),
    ],
)
def test_n_peers_conflicting_with_bounds(bounds, expected):
    assert refusal(lambda d: task(d, "split").update(bounds)) == (
        f"job 'wc': task 'split': {expected}"
    )


def test_n_peers_agreeing_with_bounds_is_accepted():
    doc = wordcount.document()
    task(doc, "split").update(min_peers=2, max_peers=2)
    assert from_dict(doc) == from_dict(wordcount.document())


def test_n_peers_conflict_in_python():
    job = wordcount.built()
    split = Task("split", "function", fn=f"{FNS}:split", n_peers=2, max_peers=3)
    bad = Job(job.workflow, (job.catalog[0], split, *job.catalog[2:]), id="wc")
    with pytest.raises(JobError, match=r"^job 'wc': task 'split': n_peers 2 conflicts with max"):
        validate(bad)


@pytest.mark.parametrize("value", [0, 100.5, -3, "half"])
def test_job_percentage_out_of_range(value):
    assert refusal(lambda d: d.update(percentage=value)) == (
        f"job 'wc': percentage must be a number > 0 and <= 100, got {value!r}"
    )


def test_task_percentages_under_the_percentage_scheduler():
    def shares(*values: float) -> Callable[[Doc], None]:
        def change(doc: Doc) -> None:
            doc["task_scheduler"] = "percentage"
            for entry, value in zip(doc["catalog"], values, strict=False):
                entry["percentage"] = value

        return change

    assert from_dict({**wordcount.document(), "percentage": 50}).percentage == 50
    assert refusal(shares(25, 25, 25, 15)) == (
        "job 'wc': catalog: task percentages add up to 90, not 100"
    )
    assert refusal(shares(25, 25, 50)) == (
        "job 'wc': task 'write': percentage is required by the scheduler"
    )
    assert refusal(shares(25, 25, 25, 125)) == (
        "job 'wc': task 'write': percentage must be a number > 0 and <= 100, got 125"
    )
    doc = wordcount.document()
    shares(25, 25, 25, 25)(doc)
    assert [t.percentage for t in from_dict(doc).catalog] == [25, 25, 25, 25]


def test_task_percentage_without_the_percentage_scheduler():
    assert refusal(lambda d: task(d, "read").update(percentage=10)) == (
        "job 'wc': task 'read': percentage is only for task_scheduler 'percentage', not 'balanced'"
    )


def test_both_group_by_key_and_group_by_fn():
    assert refusal(lambda d: task(d, "count").update(group_by_fn=f"{FNS}:count")) == (
        "job 'wc': task 'count': group_by_key and group_by_fn are exclusive: set at most one"
    )


def test_lifecycle_for_unknown_task():
    assert refusal(lambda d: d["lifecycles"][0].update(task="store")) == (
        "job 'wc': lifecycle for task 'store': task 'store' is not in the catalog"
    )


def test_lifecycle_hook_that_does_not_import():
    message = refusal(lambda d: d["lifecycles"].append({"task": "count", "before_task": "x.y"}))
    assert message == (
        "job 'wc': lifecycle for task 'count': before_task 'x.y' does not import: "
        "no module named 'x'"
    )


def test_lifecycle_without_hooks():
    assert refusal(lambda d: d["lifecycles"].append({"task": "count"})) == (
        "job 'wc': lifecycle for task 'count': names no hook: set one of before_task, "
        "after_task, before_batch, after_batch"
    )


def test_flow_condition_from_unknown_task():
    assert refusal(lambda d: d["flow_conditions"][0].update({"from": "store"})) == (
        "job 'wc': flow condition from 'store': from 'store' is not in the catalog"
    )


def test_flow_condition_to_unknown_or_unfed_task():
    assert refusal(lambda d: d["flow_conditions"][0].update(to=["store"])) == (
        "job 'wc': flow condition from 'split': to names 'store', which is not downstream of "
        "'split'"
    )
    assert refusal(lambda d: d["flow_conditions"][0].update(to=["write"])) == (
        "job 'wc': flow condition from 'split': to names 'write', which is not downstream of "
        "'split'"
    )
    assert refusal(lambda d: d["flow_conditions"][0].update(to="some")) == (
        "job 'wc': flow condition from 'split': to must be 'all' or a non-empty list of task "
        "names, got 'some'"
    )


def test_flow_condition_predicate_and_short_circuit():
    assert refusal(lambda d: d["flow_conditions"][0].update(predicate=f"{FNS}:nope")) == (
        f"job 'wc': flow condition from 'split': predicate '{FNS}:nope' does not import: "
        f"module '{FNS}' has no attribute 'nope'"
    )
    assert refusal(lambda d: d["flow_conditions"][0].update(short_circuit="yes")) == (
        "job 'wc': flow condition from 'split': short_circuit must be true or false, got 'yes'"
    )


def test_flow_condition_to_all_is_accepted():
    doc = wordcount.document()
    doc["flow_conditions"][0]["to"] = "all"
    assert from_dict(doc).flow_conditions[0].to == "all"


def test_wrong_shapes():
    assert refusal(lambda d: d.update(catalog={"read": {}})) == (
        "job 'wc': catalog must be a list, got {'read': {}}"
    )
    assert refusal(lambda d: d["catalog"].append("read")) == (
        "job 'wc': catalog entry 4 must be a mapping, got 'read'"
    )
    assert refusal(lambda d: d["workflow"].append(["count"])) == (
        "job 'wc': workflow edge 3 must be a [from, to] pair of names, got ('count',)"
    )
    assert refusal(lambda d: d.update(workflow=[])) == (
        "job 'wc': workflow must be a non-empty list of [from, to] edges, got ()"
    )
    assert refusal(lambda d: d.update(id=7)) == (
        "job: id must be a non-empty string or absent, got 7"
    )


def test_the_python_built_job_is_valid():
    job = wordcount.built()
    assert validate(job) is job


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["catalog"][0].pop("n_peers"),
            "job 'wc': task 'read': plugin 'tests.unit.job.fixtures_fns:read_lines' does not "
            "split its share (its factory takes no splits), so as an input of a checkpointed "
            "job it needs a fixed number of peers (set n_peers, or barrier_period: null to run "
            "without checkpoints)",
        ),
        (
            lambda d: d.update(barrier_period=0),
            "job 'wc': barrier_period must be a number of seconds > 0 or null, got 0",
        ),
        (
            lambda d: d.update(resume_from=""),
            "job 'wc': resume_from must be a job id or {job: ID, savepoint: NAME}, got ''",
        ),
        (
            lambda d: d.update(resume_from={"job": "a"}),
            "job 'wc': resume_from must be a job id or {job: ID, savepoint: NAME}, "
            "got {'job': 'a'}",
        ),
    ],
)
def test_checkpoint_settings_are_checked(change, message):
    assert refusal(change) == message


def test_a_job_without_checkpoints_may_vary_its_input_peers():
    doc = wordcount.document()
    doc["catalog"][0].pop("n_peers")
    doc["barrier_period"] = None
    assert from_dict(doc).barrier_period is None


@pytest.mark.parametrize("value", [0, 32769, 2.5, "many", True])
def test_max_parallelism_out_of_range(value):
    assert refusal(lambda d: d.update(max_parallelism=value)) == (
        f"job 'wc': max_parallelism must be an int from 1 to 32768, got {value!r}"
    )
    assert refusal(lambda d: task(d, "count").update(max_parallelism=value)) == (
        f"job 'wc': task 'count': max_parallelism must be an int from 1 to 32768, got {value!r}"
    )


def splitting_input(doc: Doc, **peers: int) -> None:
    read = task(doc, "read")
    read.update(plugin="peer.plugins.jsonl:input", params={"path": "in.jsonl"}, **peers)
    del read["n_peers"]


def test_an_input_that_splits_its_share_may_run_on_peers_that_vary():
    doc = wordcount.document()
    splitting_input(doc, min_peers=1, max_peers=4)
    assert from_dict(doc).task("read").max_peers == 4
    assert refusal(lambda d: splitting_input(d, max_peers=200)) == (
        "job 'wc': task 'read': it asks for 200 peers and has 128 splits (max_parallelism): "
        "an input runs on at most one peer per split"
    )


def test_max_parallelism_on_a_task_without_keys():
    assert refusal(lambda d: task(d, "split").update(max_parallelism=8)) == (
        "job 'wc': task 'split': max_parallelism is for keyed tasks (group_by_key, group_by_fn "
        "or a join) and inputs (the splits of their share)"
    )


@pytest.mark.parametrize("where", ["job", "task"])
def test_a_keyed_task_asking_for_more_peers_than_key_groups(where):
    def change(doc: Doc) -> None:
        (doc if where == "job" else task(doc, "count")).update(max_parallelism=3)

    assert refusal(change) == (
        "job 'wc': task 'count': it asks for 4 peers and has 3 key groups (max_parallelism): "
        "a keyed task runs on at most one peer per key group"
    )


def test_a_task_names_its_own_key_groups_or_takes_the_jobs():
    doc = wordcount.document()
    doc["max_parallelism"] = 64
    assert from_dict(doc).key_groups("count") == 64
    task(doc, "count")["max_parallelism"] = 16
    assert from_dict(doc).key_groups("count") == 16
    assert from_dict(wordcount.document()).key_groups("count") == 128


def test_a_fn_class_keeping_keyed_state_on_a_task_without_keys():
    assert refusal(lambda d: task(d, "split").update(fn=f"{FNS}:KeepsState")) == (
        f"job 'wc': task 'split': fn '{FNS}:KeepsState' keeps keyed state (its class has open), "
        "so the task needs group_by_key or group_by_fn"
    )


def test_a_state_backend_not_known_is_refused():
    assert refusal(lambda d: d.update(state_backend="tape")) == (
        "job 'wc': state_backend must be one of memory, disk, got 'tape'"
    )


def count_window(doc: Doc, **extra: Any) -> None:
    """The count task's fn left to a window of its own, which counts per word."""
    task(doc, "count").pop("fn")
    task(doc, "count").update(extra)
    doc["windows"] = [{"id": "words", "task": "count", "type": "global", "aggregation": "count"}]


def test_a_function_task_whose_windows_make_what_it_sends_needs_no_fn():
    doc = wordcount.document()
    count_window(doc)
    assert from_dict(doc).task("count").fn is None


def test_a_task_on_another_engine_needs_its_fn_even_with_windows():
    assert refusal(lambda d: count_window(d, engine="arrow")) == (
        "job 'wc': task 'count': fn is required for a function task on engine 'arrow'"
    )
