"""Cluster membership after Akka: members' lifecycle and reachability, gossiped as a CRDT."""
