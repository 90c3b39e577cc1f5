"""Monitoring for onyx: Prometheus rules and Grafana dashboards."""
