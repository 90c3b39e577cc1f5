"""Grafana for onyx: dashboards written as code (``dashboards.py``) and their provisioning."""
