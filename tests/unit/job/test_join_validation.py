"""A join that cannot work is refused at submit in one line naming the job, the join and the
field: sides that are not the task's two upstream tasks, keys of unequal arity or (where both
sides declare a schema) of unequal types, windows and intervals of no length, a ttl shorter
than what a row waits for its pairs, a task that has code, keys or windows of its own; a good
one loads back from its YAML as the same job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from peer.job.flow import Flow
from peer.job.load import from_dict, from_yaml
from peer.job.spec import JobError

Doc = dict[str, Any]


def document() -> Doc:
    return {
        "id": "jj",
        "workflow": [["people", "joined"], ["sales", "joined"], ["joined", "out"]],
        "catalog": [
            {
                "name": "people",
                "kind": "input",
                "plugin": "peer.plugins.memory:input",
                "n_peers": 1,
            },
            {"name": "sales", "kind": "input", "plugin": "peer.plugins.memory:input", "n_peers": 1},
            {"name": "joined", "kind": "function"},
            {"name": "out", "kind": "output", "plugin": "peer.plugins.null:output"},
        ],
        "joins": [
            {
                "id": "j",
                "task": "joined",
                "type": "window",
                "left": "people",
                "right": "sales",
                "left_key": "id",
                "right_key": "seller",
                "left_time": "t",
                "right_time": "t",
                "range": 10,
            }
        ],
    }


def join(doc: Doc) -> Doc:
    return doc["joins"][0]


def task(doc: Doc, name: str) -> Doc:
    return next(t for t in doc["catalog"] if t["name"] == name)


def refusal(change: Callable[[Doc], Any]) -> str:
    doc = document()
    change(doc)
    with pytest.raises(JobError) as caught:
        from_dict(doc)
    return str(caught.value)


def test_the_join_loads():
    assert from_dict(document()).join_of("joined").right_key == "seller"


REFUSED = {
    "unknown type": (lambda d: join(d).update(type="outer"),
                     "type 'outer' is not one of 'window', 'interval', 'regular'"),
    "a side not upstream": (lambda d: join(d).update(right="out"),
                            "left and right must be the two tasks upstream of task 'joined' "
                            "(people and sales), got 'people' and 'out'"),
    "one side twice": (lambda d: join(d).update(right="people"),
                       "left and right must be the two tasks upstream"),
    "a third upstream": (lambda d: d["workflow"].append(["joined2", "joined"])
                         or d["catalog"].append({**task(d, "people"), "name": "joined2"}),
                         "left and right must be the two tasks upstream of task 'joined' "
                         "(joined2, people and sales)"),
    "keys of unequal arity": (lambda d: join(d).update(right_key=["seller", "city"]),
                              "left_key has 1 fields and right_key 2"),
    "an empty key": (lambda d: join(d).update(left_key=""),
                     "left_key must be a field name (a non-empty string), got ''"),
    "a window of no length": (lambda d: join(d).update(range=0), "range must be a number > 0"),
    "a negative slide": (lambda d: join(d).update(slide=-1), "slide must be a number > 0"),
    "a slide past the range": (lambda d: join(d).update(slide=20),
                               "slide 20 is more than range 10"),
    "a window without times": (lambda d: join(d).pop("left_time"),
                               "left_time is required for a window join"),
    "a ttl shorter than the window": (lambda d: join(d).update(ttl=5),
                                      "ttl 5 is shorter than the window's range (10)"),
    "a bound of another type": (lambda d: join(d).update(upper=3),
                                "upper means nothing to a window join"),
    "an interval without its end": (lambda d: join(d).update(type="interval", range=None),
                                     "an interval join needs upper"),
    "an empty interval": (lambda d: join(d).update(type="interval", range=None, lower=5,
                                                   upper=2),
                          "upper 2 is below lower 5: the interval is empty"),
    "a ttl shorter than the interval": (lambda d: join(d).update(type="interval", range=None,
                                                                 upper=20, ttl=10),
                                        "ttl 10 is shorter than the interval (20)"),
    "a regular join without ttl": (lambda d: join(d).update(type="regular", range=None),
                                   "ttl is required for a regular join"),
    "a negative ttl": (lambda d: join(d).update(type="regular", range=None, ttl=-1),
                       "ttl must be a number > 0, got -1"),
    "a join task with a fn": (lambda d: task(d, "joined").update(fn="builtins:dict"),
                              "task 'joined' joins, so it has no fn"),
    "a join task with a key": (lambda d: task(d, "joined").update(group_by_key="id"),
                               "task 'joined' joins, so it has no group_by_key"),
    "an input that joins": (lambda d: join(d).update(task="people"),
                            "task 'people' must be a function task on engine 'python' to join"),
    "a task not in the catalog": (lambda d: join(d).update(task="nobody"),
                                  "task 'nobody' is not in the catalog"),
    "an output that joins": (lambda d: join(d).update(task="out"),
                             "task 'out' must be a function task on engine 'python' to join"),
    "an emit that does not import": (lambda d: join(d).update(emit="builtins:nope"),
                                     "emit 'builtins:nope' does not import"),
    "keys of unequal declared types": (
        lambda d: (task(d, "people").update(schema="id BIGINT, t BIGINT"),
                   task(d, "sales").update(schema="seller STRING, t BIGINT")),
        "left_key 'id' is bigint and right_key 'seller' is string: keys of unequal types "
        "never match"),
    "a key outside a declared schema": (
        lambda d: (task(d, "people").update(schema="name STRING, t BIGINT"),
                   task(d, "sales").update(schema="seller STRING, t BIGINT")),
        "left_key 'id' is not a field of task 'people''s schema"),
    "a side output not downstream": (lambda d: join(d).update(late="people"),
                                     "late 'people' must be a task downstream of task "
                                     "'joined' (its side output), one of: out"),
    "a side output that is all": (lambda d: join(d).update(late="out"),
                                  "late 'out' is task 'joined''s only downstream task"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_join_is_refused_naming_the_job_the_join_and_the_field(case):
    change, expected = REFUSED[case]
    message = refusal(change)
    assert message.startswith("job 'jj': join 'j': "), message
    assert expected in message
    assert "\n" not in message


def test_a_join_written_in_python_loads_back_from_its_yaml():
    flow = Flow("joined", barrier_period=1.0)
    people = flow.input("people", "peer.plugins.memory:input", n_peers=1)
    sales = flow.input("sales", "peer.plugins.memory:input", n_peers=1)
    joined = people.join("joined", sales, "interval", key="id", other_key="seller", time="t",
                         lower=-1, until="ends", n_peers=2)  # fmt: skip
    joined.output("out", "peer.plugins.null:output")
    job = flow.job()
    spec = job.join_of("joined")
    assert (spec.left, spec.right, spec.left_time, spec.right_time) == ("people", "sales", "t",
                                                                        "t")  # fmt: skip
    assert job.task("joined").n_peers == 2
    assert job.keyed("joined")
    assert from_yaml(flow.to_yaml()) == job


def test_a_flow_join_with_a_setting_it_has_not_is_refused_naming_it():
    flow = Flow()
    people = flow.input("people", "peer.plugins.memory:input", n_peers=1)
    sales = flow.input("sales", "peer.plugins.memory:input", n_peers=1)
    with pytest.raises(JobError, match=r"join 'joined': .*'gap'"):
        people.join("joined", sales, "window", key="id", gap=3)
