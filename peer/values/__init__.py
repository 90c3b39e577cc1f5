"""The values every layer shares, at the bottom of the package graph: the batch
(``columnar``), the epoch (``epoch``) and the limits of a log entry (``limits``).

Nothing here imports another package of the project, so any package may import it; a test
(tests/unit/test_layers.py) keeps the graph of packages free of cycles.
"""
