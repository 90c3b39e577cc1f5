"""The clickstream's two cleaning steps are one computation: ``clean`` on Spark (what the
Structured Streaming baseline runs) and ``clean_arrow`` on Arrow (what the job runs) give the same
rows, in the same order, with the same schema, for generated views and for the dirt a click log
holds (bots, missing visitors and agents, pages in other case or with a trailing slash, pages the
pages table does not name)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples.clickstream import generate, pipeline
from peer.job.arrow_schema import to_table
from peer.values.columnar import from_table

pytestmark = pytest.mark.integration

PAGES = [page for page, _ in generate.pages()]
DIRTY = [
    {"user_id": None, "page": "/help", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "/HELP/", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "/", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "//", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "/nowhere", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": None, "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "", "user_agent": "Mozilla/5.0"},
    {"user_id": "u1", "page": "/cart", "user_agent": None},
    {"user_id": "u2", "page": "/cart", "user_agent": "Googlebot/2.1"},
    {"user_id": "u2", "page": "/cart", "user_agent": "SomeBOT"},
    {"user_id": "u2", "page": "/Product/7/", "user_agent": "Mozilla/5.0 (iPhone)"},
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The generated pages table, as the example writes it."""
    base = tmp_path_factory.mktemp("clickstream")
    generate.write(base, 1, 1, 1, 7)
    return str(base / "pages.csv")


def views(partial: list[dict]) -> pa.RecordBatch:
    """Views of the example's schema, the fields a row leaves out filled in."""
    full = [
        {"ts": 1_767_225_600.0 + i, "referrer": "", "duration_ms": i * 7, **row}
        for i, row in enumerate(partial)
    ]
    return from_table(to_table(full, generate.SCHEMA))


def both(spark, batch: pa.RecordBatch, pages: str) -> tuple[pa.Table, pa.Table]:
    """What the Spark clean and the Arrow clean make of ``batch``."""
    params = {"pages": pages}
    on_spark = pipeline.clean(spark.createDataFrame(pa.Table.from_batches([batch])), params)
    return on_spark.toArrow(), pa.Table.from_batches([pipeline.clean_arrow(batch, params)])


def test_the_dirt_of_a_click_log_is_cleaned_alike(spark, pages):
    on_spark, on_arrow = both(spark, views(DIRTY), pages)
    assert on_arrow.schema == on_spark.schema
    assert on_arrow.to_pylist() == on_spark.to_pylist()
    assert {row["section"] for row in on_arrow.to_pylist()} >= {"help", "other", "product"}


def test_generated_views_are_cleaned_alike(spark, pages, tmp_path):
    generate.write(tmp_path, 20_000, 200, 2, 7)
    batch = from_table(ds.dataset(tmp_path / "events").to_table())
    on_spark, on_arrow = both(spark, batch, str(tmp_path / "pages.csv"))
    assert on_arrow.num_rows > 0.9 * batch.num_rows
    assert on_arrow.to_pylist() == on_spark.to_pylist()


TEXT = st.text(alphabet="/abcBOTÉüx", max_size=8)
VIEW = st.fixed_dictionaries(
    {
        "user_id": st.none() | st.sampled_from(["u1", "u2"]),
        "page": st.none() | st.sampled_from(PAGES) | TEXT,
        "user_agent": st.none() | st.sampled_from(generate.AGENTS + generate.BOTS) | TEXT,
        "page_case": st.booleans(),
        "slash": st.booleans(),
    }
)


def dirty(view: dict) -> dict:
    """A view whose page may be written in upper case and with a trailing slash."""
    page = view["page"]
    if page is not None and view["page_case"]:
        page = page.upper()
    if page is not None and view["slash"]:
        page += "/"
    return {"user_id": view["user_id"], "page": page, "user_agent": view["user_agent"]}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(VIEW, min_size=1, max_size=30))
def test_any_views_are_cleaned_alike(spark, pages, drawn):
    on_spark, on_arrow = both(spark, views([dirty(view) for view in drawn]), pages)
    assert on_arrow.to_pylist() == on_spark.to_pylist()
