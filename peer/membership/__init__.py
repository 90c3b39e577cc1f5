"""Membership after Akka Cluster: failure detection, who monitors whom, and the members'
lifecycle and reachability, gossiped as a CRDT."""
