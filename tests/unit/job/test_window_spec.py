"""Windows and triggers in a job: they load from YAML, JSON and Python alike, round-trip through
``to_dict``, and every mistake in them is refused naming the job, the window or trigger, and the
field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from peer.job.load import YamlLoader, from_dict, from_json, from_yaml, load
from peer.job.spec import Job, JobError, Trigger, Window
from peer.job.validate import validate
from tests.unit.job import wordcount

STATE = "tests.unit.state.state_fns"
Doc = dict[str, Any]

WINDOWS_YAML = f"""
windows:
  - {{id: per-minute, task: count, type: fixed, aggregation: count, key: time, range: 60}}
  - id: trend
    task: count
    type: sliding
    aggregation: sum
    key: time
    range: 60
    slide: 15
    field: n
  - {{id: visits, task: write, type: session, aggregation: collect, key: time, gap: 30}}
  - {{id: words, task: count, type: global, aggregation: "{STATE}:DISTINCT", field: word}}
triggers:
  - {{window: per-minute, on: watermark}}
  - {{window: per-minute, on: segment, threshold: 100, refinement: discarding}}
  - {{window: trend, on: timer, period: 2.5, emit: "{STATE}:total"}}
  - {{window: visits, on: punctuation, predicate: "{STATE}:is_last", sync: "{STATE}:record"}}
"""

WINDOWS = (
    Window("per-minute", "count", "fixed", "count", key="time", range=60),
    Window("trend", "count", "sliding", "sum", key="time", range=60, slide=15, field="n"),
    Window("visits", "write", "session", "collect", key="time", gap=30),
    Window("words", "count", "global", f"{STATE}:DISTINCT", field="word"),
)
TRIGGERS = (
    Trigger("per-minute", "watermark"),
    Trigger("per-minute", "segment", threshold=100, refinement="discarding"),
    Trigger("trend", "timer", period=2.5, emit=f"{STATE}:total"),
    Trigger("visits", "punctuation", predicate=f"{STATE}:is_last", sync=f"{STATE}:record"),
)


def document() -> Doc:
    return {**wordcount.document(), **yaml.load(WINDOWS_YAML, Loader=YamlLoader)}


def refusal(change: Callable[[Doc], Any], *, imports: bool = True) -> str:
    doc = document()
    change(doc)
    with pytest.raises(JobError) as caught:
        from_dict(doc, imports=imports)
    return str(caught.value)


def window(doc: Doc, window_id: str) -> Doc:
    return next(w for w in doc["windows"] if w["id"] == window_id)


def test_yaml_json_python_and_to_dict_give_equal_jobs():
    job = from_yaml(wordcount.YAML + WINDOWS_YAML)
    assert job.windows == WINDOWS
    assert job.triggers == TRIGGERS
    built = wordcount.built()
    assert job == validate(Job(**{**_fields(built), "windows": WINDOWS, "triggers": TRIGGERS}))
    assert from_json(json.dumps(document())) == job
    doc = job.to_dict()
    assert doc["windows"] == document()["windows"]
    assert doc["triggers"] == document()["triggers"]
    assert load(doc) == job
    assert from_json(json.dumps(doc)) == job


def _fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


def test_lists_become_tuples_and_the_job_stays_hashable():
    doc = document()
    job = Job(**{**_fields(from_dict(doc)), "windows": list(WINDOWS), "triggers": list(TRIGGERS)})
    assert job.windows == WINDOWS
    assert isinstance(hash(job), int)


def test_on_is_a_key_in_yaml_not_a_boolean():
    assert yaml.load("on: segment", Loader=YamlLoader) == {"on": "segment"}
    assert yaml.load("[true, False, yes, off]", Loader=YamlLoader) == [True, False, "yes", "off"]


def test_a_job_without_windows_writes_none():
    doc = wordcount.built().to_dict()
    assert "windows" not in doc
    assert "triggers" not in doc


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(windows={"a": 1}), "windows must be a list, got {'a': 1}"),
        (lambda d: d["windows"].append(3), "window 4 must be a mapping, got 3"),
        (lambda d: d["windows"][0].pop("id"), "window 0: missing key 'id'"),
        (lambda d: d["windows"][1].pop("type"), "window 'trend': missing key 'type'"),
        (
            lambda d: window(d, "trend").update(size=3),
            "window 'trend': unknown key 'size' (allowed: aggregation, field, gap, id, key, late, "
            "range, slide, task, top, ttl, type)",
        ),
        (lambda d: d["windows"][0].update(id=7), "window 0: id must be a non-empty string, got 7"),
        (
            lambda d: window(d, "words").update(id="trend"),
            "window 'trend': id is listed twice in the windows",
        ),
        (
            lambda d: window(d, "trend").update(task="store"),
            "window 'trend': task 'store' is not in the catalog",
        ),
        (
            lambda d: window(d, "trend").update(task="read"),
            "window 'trend': task 'read' is an input task: windows are for function and output "
            "tasks",
        ),
        (
            lambda d: window(d, "trend").update(type="tumbling"),
            "window 'trend': type 'tumbling' is not one of 'fixed', 'sliding', 'global', 'session'",
        ),
        (
            lambda d: window(d, "per-minute").pop("key"),
            "window 'per-minute': key is required for a fixed window",
        ),
        (
            lambda d: window(d, "visits").update(key=""),
            "window 'visits': key must be a field name (a non-empty string), got ''",
        ),
        (
            lambda d: window(d, "words").update(key="time"),
            "window 'words': key is only for fixed, sliding and session windows, not global",
        ),
        (
            lambda d: window(d, "per-minute").pop("range"),
            "window 'per-minute': range is required for a fixed window",
        ),
        (
            lambda d: window(d, "per-minute").update(range=0),
            "window 'per-minute': range must be a number > 0, got 0",
        ),
        (
            lambda d: window(d, "per-minute").update(range="1m"),
            "window 'per-minute': range must be a number > 0, got '1m'",
        ),
        (
            lambda d: window(d, "per-minute").update(slide=10),
            "window 'per-minute': slide is only for sliding windows, not fixed",
        ),
        (
            lambda d: window(d, "trend").pop("slide"),
            "window 'trend': slide is required for a sliding window",
        ),
        (
            lambda d: window(d, "trend").update(slide=-1),
            "window 'trend': slide must be a number > 0, got -1",
        ),
        (
            lambda d: window(d, "trend").update(slide=90),
            "window 'trend': slide 90 is more than range 60",
        ),
        (
            lambda d: window(d, "visits").pop("gap"),
            "window 'visits': gap is required for a session window",
        ),
        (
            lambda d: window(d, "trend").update(gap=5),
            "window 'trend': gap is only for session windows, not sliding",
        ),
        (
            lambda d: window(d, "trend").update(aggregation="avg"),
            "window 'trend': aggregation 'avg' is neither one of 'count', 'sum', 'min', 'max', "
            "'average', 'collect', 'collect_by_key', 'top' nor a dotted path to a user "
            "aggregation",
        ),
        (
            lambda d: window(d, "trend").update(aggregation=["sum"]),
            "window 'trend': aggregation ['sum'] is neither one of 'count', 'sum', 'min', 'max', "
            "'average', 'collect', 'collect_by_key', 'top' nor a dotted path to a user "
            "aggregation",
        ),
        (
            lambda d: window(d, "trend").pop("field"),
            "window 'trend': field is required for a sum aggregation",
        ),
        (
            lambda d: window(d, "visits").update(aggregation="collect_by_key"),
            "window 'visits': field is required for a collect_by_key aggregation",
        ),
        (
            lambda d: window(d, "per-minute").update(field="n"),
            "window 'per-minute': field is only for sum, min, max, average, collect_by_key, top "
            "and user aggregations, not count",
        ),
        (
            lambda d: window(d, "trend").update(aggregation="top", top=0),
            "window 'trend': top must be an int >= 1, got 0",
        ),
        (
            lambda d: window(d, "trend").update(top=3),
            "window 'trend': top is only for the top aggregation, not sum",
        ),
        (
            lambda d: window(d, "trend").update(field=3),
            "window 'trend': field must be a field name (a non-empty string), got 3",
        ),
        (
            lambda d: window(d, "words").update(aggregation="no_such_pkg.agg"),
            "window 'words': aggregation 'no_such_pkg.agg' does not import: no module named "
            "'no_such_pkg'",
        ),
        (
            lambda d: window(d, "words").update(aggregation=f"{STATE}:NO_MERGE"),
            f"window 'words': aggregation '{STATE}:NO_MERGE' has no method merge",
        ),
        (
            lambda d: d["catalog"][3].update(schema={"word": "string", "count": "bigint"}),
            "window 'visits': key 'time' is not a field of task 'write''s schema",
        ),
        (
            lambda d: d["catalog"][2].update(schema="n bigint"),
            "task 'count': group_by_key 'word' is not a field of its schema",
        ),
        (
            lambda d: window(d, "words").update(aggregation=f"{STATE}:record"),
            f"window 'words': aggregation '{STATE}:record' has no method init, "
            "create_state_update, apply_state_update, merge, value",
        ),
    ],
)
def test_window_mistakes(change, expected):
    assert refusal(change) == f"job 'wc': {expected}"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(triggers="all"), "triggers must be a list, got 'all'"),
        (lambda d: d["triggers"].append([]), "trigger 4 must be a mapping, got []"),
        (lambda d: d["triggers"][0].pop("window"), "trigger 0: missing key 'window'"),
        (
            lambda d: d["triggers"][0].pop("on"),
            "trigger 0 of window 'per-minute': missing key 'on'",
        ),
        (
            lambda d: d["triggers"][0].update(every=3),
            "trigger 0 of window 'per-minute': unknown key 'every' (allowed: emit, on, period, "
            "predicate, refinement, sync, threshold, window)",
        ),
        (
            lambda d: d["triggers"][2].update(window="nope"),
            "trigger 2 of window 'nope': window 'nope' is not in the windows",
        ),
        (
            lambda d: d["triggers"][0].update(on="close"),
            "trigger 0 of window 'per-minute': on 'close' is not one of 'segment', 'timer', "
            "'watermark', 'punctuation'",
        ),
        (
            lambda d: d["triggers"][1].pop("threshold"),
            "trigger 1 of window 'per-minute': threshold is required for a trigger on 'segment'",
        ),
        (
            lambda d: d["triggers"][1].update(threshold=0),
            "trigger 1 of window 'per-minute': threshold must be an int >= 1, got 0",
        ),
        (
            lambda d: d["triggers"][1].update(threshold=2.5),
            "trigger 1 of window 'per-minute': threshold must be an int >= 1, got 2.5",
        ),
        (
            lambda d: d["triggers"][0].update(threshold=5),
            "trigger 0 of window 'per-minute': threshold is only for triggers on 'segment', "
            "not 'watermark'",
        ),
        (
            lambda d: d["triggers"][2].pop("period"),
            "trigger 2 of window 'trend': period is required for a trigger on 'timer'",
        ),
        (
            lambda d: d["triggers"][2].update(period=0),
            "trigger 2 of window 'trend': period must be a number of seconds > 0, got 0",
        ),
        (
            lambda d: d["triggers"][2].update(predicate=f"{STATE}:is_last"),
            "trigger 2 of window 'trend': predicate is only for triggers on 'punctuation', "
            "not 'timer'",
        ),
        (
            lambda d: d["triggers"][3].pop("predicate"),
            "trigger 3 of window 'visits': predicate is required for a trigger on 'punctuation'",
        ),
        (
            lambda d: d["triggers"][3].update(predicate=f"{STATE}:NOT_CALLABLE"),
            f"trigger 3 of window 'visits': predicate '{STATE}:NOT_CALLABLE' is not callable",
        ),
        (
            lambda d: d["triggers"][1].update(refinement="retracting"),
            "trigger 1 of window 'per-minute': refinement 'retracting' is not one of "
            "'accumulating', 'discarding'",
        ),
        (
            lambda d: d["triggers"][2].update(emit=f"{STATE}:nope"),
            f"trigger 2 of window 'trend': emit '{STATE}:nope' does not import: module "
            f"'{STATE}' has no attribute 'nope'",
        ),
        (
            lambda d: d["triggers"][3].update(sync=5),
            "trigger 3 of window 'visits': sync must be a dotted path string, got 5",
        ),
    ],
)
def test_trigger_mistakes(change, expected):
    assert refusal(change) == f"job 'wc': {expected}"


def test_without_imports_only_the_shape_of_paths_is_checked():
    def unimportable(doc: Doc) -> None:
        window(doc, "words")["aggregation"] = "no_such_pkg.agg"
        doc["triggers"][2]["emit"] = "no_such_pkg.emit"

    doc = document()
    unimportable(doc)
    job = from_dict(doc, imports=False)
    assert job.windows[3].aggregation == "no_such_pkg.agg"
    malformed = refusal(lambda d: d["triggers"][3].update(sync="a b"), imports=False)
    assert malformed == (
        "job 'wc': trigger 3 of window 'visits': sync 'a b' does not import: "
        "is not 'package.module:attribute' or 'package.module.attribute'"
    )


def test_windows_and_triggers_of_the_wrong_type_in_python():
    job = wordcount.built()
    with pytest.raises(JobError, match=r"^job 'wc': windows must be a list of Window, got \(1,\)$"):
        validate(Job(**{**_fields(job), "windows": (1,)}))
    with pytest.raises(JobError, match=r"^job 'wc': triggers must be a list of Trigger, got"):
        validate(Job(**{**_fields(job), "triggers": (WINDOWS[0],)}))
