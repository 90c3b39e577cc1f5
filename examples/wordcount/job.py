"""The word count of job.yaml, written in Python: the same job. Run it as the YAML one:

.venv/bin/onyx run examples/wordcount/job.py
"""

from examples.wordcount import words
from peer.job.flow import Flow

job = Flow()
lines = job.input(
    "read", "peer.plugins.jsonl:input", path="examples/wordcount/lines.jsonl", max_peers=1
)
counts = lines.map("split", words.split).map("count", group_by_key="word")
counts.window("words", "global", aggregation="count").trigger("watermark", emit=words.total)
counts.output(
    "write", "peer.plugins.jsonl:output", path="out/wordcount.jsonl", overwrite=True, max_peers=1
)
