"""A masterless stream processor: peer groups coordinating through one ordered log."""

__version__ = "0.1.0"
