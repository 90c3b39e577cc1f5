"""Membership after Akka Cluster: failure detection, who monitors whom, gossiped state."""
