"""The clickstream pipeline's code: page views are cleaned and joined with the pages table, the
peers gather each visitor's views into visits (session windows), and each visit becomes one row of
the sessions table.

The cleaning step is written twice, as the same computation: ``clean`` on a Spark DataFrame (what
a Spark task or a Structured Streaming query runs) and ``clean_arrow`` on an Arrow record batch
with pyarrow.compute (what the job's ``engine: arrow`` task runs, in the peers' process, without a
round trip through Spark per batch). Both give the same rows in the same order.

Only ``clean`` needs Spark: pyspark is imported when it runs, so the other steps run on members
installed without it.

A visit ends after 30 minutes without a view. Visits close as event time passes them (the input's
watermark), so the table grows while the job runs; only committed epochs ever reach it.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from peer.storage import attempts, open_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OTHER = "other"
"""The section of a page the pages table does not name."""


def clean(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    """Drops bots and views without a visitor, writes every page one way (lower case, no
    trailing slash) and adds its section from the pages table (``other`` if it has none)."""
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark only where clean runs)

    page = F.regexp_replace(F.lower("page"), "(.)/$", "$1")
    views = df.filter(F.col("user_id").isNotNull() & ~F.lower("user_agent").rlike("bot"))
    return (
        views.withColumn("page", page)
        .join(F.broadcast(_pages(df.sparkSession, params["pages"])), "page", "left")
        .select(
            "user_id",
            "ts",
            "page",
            F.coalesce("section", F.lit(OTHER)).alias("section"),
            "duration_ms",
        )
    )


@functools.cache
def _pages(spark: SparkSession, path: str) -> DataFrame:
    """The pages table, read once per session and kept: every batch joins with it. The driver
    reads it, as ``clean_arrow`` does, and hands Spark its rows, so that it may be on an object
    store Spark has no connector for, and need not be on a cluster's workers."""
    pages, sections = _pages_arrow(path)
    return spark.createDataFrame(pa.table({"page": pages, "section": sections})).cache()


def clean_arrow(batch: pa.RecordBatch, params: dict[str, Any]) -> pa.RecordBatch:
    """``clean`` on an Arrow batch: the same filter, page spelling and left join, in the batch's
    order. A view's page looks its section up in the pages table by position (a left join that
    keeps the views' order); a null page matches no page, as in a join. Lower case is Arrow's
    (Unicode's simple case mapping), Spark's is Java's: the two differ for a few letters, such as
    the dotted capital I, which no page or user agent of the generated data holds."""
    keys, sections = _pages_arrow(params["pages"])
    agent = pc.utf8_lower(batch.column("user_agent"))
    keep = pc.and_kleene(
        pc.is_valid(batch.column("user_id")), pc.invert(pc.match_substring_regex(agent, "bot"))
    )
    views = batch.filter(keep)
    page = pc.replace_substring_regex(pc.utf8_lower(views.column("page")), r"(.)/$", r"\1")
    found = pc.index_in(page, value_set=keys, skip_nulls=True)
    section = pc.coalesce(pc.take(sections, found), pa.scalar(OTHER))
    columns = [views.column("user_id"), views.column("ts"), page, section]
    return pa.RecordBatch.from_arrays(
        [*columns, views.column("duration_ms")], schema=_cleaned(views.schema)
    )


def _cleaned(views: pa.Schema) -> pa.Schema:
    """What ``clean`` gives as Arrow: the views' types, and a section that is never null."""
    keep = [views.field(name) for name in ("user_id", "ts", "page")]
    section = pa.field("section", pa.string(), nullable=False)
    return pa.schema([*keep, section, views.field("duration_ms")])


def _pages_arrow(path: str) -> tuple[pa.Array, pa.Array]:
    """The pages table's pages and their sections, read once per process and again when the file
    changes. ``path`` is a file or an object store's URL; a store's reads are retried while it is
    out of reach (the job rolls back if it stays so)."""
    fs, at = open_url(path)
    return _read_pages(path, attempts(fs)("read", path, lambda: fs.checksum(at)))


@functools.cache
def _read_pages(path: str, version: int) -> tuple[pa.Array, pa.Array]:
    """Read as Spark reads the CSV: every column a string, an empty field null. A page named
    twice would make the join give a view twice, so it is refused, naming the file."""
    fs, at = open_url(path)
    data = attempts(fs)("read", path, lambda: fs.cat_file(at))
    strings = {"page": pa.string(), "section": pa.string()}
    options = pcsv.ConvertOptions(column_types=strings, null_values=[""], strings_can_be_null=True)
    table = pcsv.read_csv(pa.BufferReader(data), convert_options=options)
    pages, sections = table.column("page").combine_chunks(), table.column("section")
    if len(pc.unique(pages.drop_null())) != len(pages.drop_null()):
        raise ValueError(f"pages table {path}: a page is named more than once")
    return pages, sections.combine_chunks()


def event_time(view: dict[str, Any]) -> float:
    """The input's watermark follows the views' times: each file is in time order."""
    return view["ts"]


VISIT_FIELDS = ("user_id", "ts", "section", "duration_ms")
"""What a visit reads of a view."""


def view(batch: pa.RecordBatch) -> pa.RecordBatch:
    """What the visits task keeps of the views, still Arrow: the columns a visit reads, so the
    window makes rows of those alone."""
    return batch.select(list(VISIT_FIELDS))


class Visit:
    """A session window's aggregation: views, time spent, first and last view, and views per
    section. Merging two visits (a view that bridges them) adds them up."""

    def init(self, window: Any) -> dict[str, Any]:
        return {"views": 0, "duration_ms": 0, "first": None, "last": None, "sections": {}}

    def create_state_update(self, window: Any, state: Any, segment: dict[str, Any]) -> Any:
        return segment

    def apply_state_update(self, window: Any, state: dict[str, Any], view: Any) -> dict[str, Any]:
        """One more view, counted into the state in place: the window owns the state."""
        t, section = view["ts"], view["section"]
        state["views"] += 1
        state["duration_ms"] += view["duration_ms"]
        if state["first"] is None or t < state["first"]:
            state["first"] = t
        if state["last"] is None or t > state["last"]:
            state["last"] = t
        sections = state["sections"]
        sections[section] = sections.get(section, 0) + 1
        return state

    def merge(self, window: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """``b`` added into ``a``, which the window owns and gives up."""
        sections = a["sections"]
        for name, views in b["sections"].items():
            sections[name] = sections.get(name, 0) + views
        times = [t for t in (a["first"], a["last"], b["first"], b["last"]) if t is not None]
        a["views"] += b["views"]
        a["duration_ms"] += b["duration_ms"]
        a["first"], a["last"] = (min(times), max(times)) if times else (None, None)
        return a

    def value(self, state: dict[str, Any]) -> dict[str, Any]:
        """A copy: the emitted visit must not share the state the window goes on changing."""
        return {**state, "sections": dict(state["sections"])}


visit = Visit()


def session_row(event: dict[str, Any]) -> dict[str, Any]:
    """One row of the sessions table for a visit the watermark closed."""
    state = event["value"]
    top = max(sorted(state["sections"]), key=lambda name: state["sections"][name])
    start = state["first"]
    return {
        "user_id": event["key"],
        "day": dt.datetime.fromtimestamp(start, dt.UTC).date().isoformat(),
        "start": start,
        "end": state["last"],
        "views": state["views"],
        "duration_ms": state["duration_ms"],
        "top_section": top,
    }
