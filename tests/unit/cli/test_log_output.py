"""Log lines as text or JSON, and no timestamps of ours where journald stamps them."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer import log_output


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def journal_of(stream) -> str:
    found = os.fstat(stream.fileno())
    return f"{found.st_dev}:{found.st_ino}"


@given(message=st.text(), name=st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,2}", fullmatch=True))
def test_a_json_line_is_one_object_with_time_level_logger_and_message(message, name):
    record = logging.LogRecord(name, logging.WARNING, __file__, 1, "%s", (message,), None)
    line = log_output.JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["message"] == message
    assert (doc["level"], doc["logger"]) == ("warning", name)
    assert doc["time"].endswith("+00:00")
    assert "exception" not in doc


def test_a_json_line_carries_the_exception():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    doc = json.loads(log_output.JsonFormatter().format(record))
    assert "ValueError: boom" in doc["exception"]
    assert "Traceback" in doc["exception"]


def test_journald_is_recognised_only_on_its_own_stream(tmp_path):
    with (tmp_path / "journal").open("w") as journal, (tmp_path / "other").open("w") as other:
        environ = {"JOURNAL_STREAM": journal_of(journal)}
        assert log_output.under_journald(journal, environ)
        assert not log_output.under_journald(other, environ)
        assert not log_output.under_journald(journal, {})
        assert not log_output.under_journald(journal, {"JOURNAL_STREAM": "junk"})


@pytest.mark.parametrize(("journald", "stamped"), [(True, False), (False, True)])
def test_text_lines_carry_a_timestamp_unless_journald_stamps_them(
    tmp_path, restore_logging, journald, stamped
):
    path = tmp_path / "stderr"
    with path.open("w") as stream:
        environ = {"JOURNAL_STREAM": journal_of(stream)} if journald else {}
        log_output.configure("info", "text", stream, environ)
        logging.getLogger("peer.test").info("hello")
        logging.getLogger("peer.test").debug("not shown")
    (line,) = path.read_text().splitlines()
    assert line.endswith("INFO peer.test: hello")
    assert line.startswith("INFO") is not stamped


def test_json_format_and_level(tmp_path, restore_logging):
    path = tmp_path / "stderr"
    with path.open("w") as stream:
        log_output.configure("warning", "json", stream, {})
        logging.getLogger("peer.test").info("quiet")
        logging.getLogger("peer.test").error("loud")
    (line,) = path.read_text().splitlines()
    assert json.loads(line)["message"] == "loud"
