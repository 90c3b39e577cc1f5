"""Nexmark's queries written as jobs (``qN.py``, each runnable with ``onyx run``), and the
oracle that answers them independently (``oracle.py``: DuckDB's SQL over the same events)."""
