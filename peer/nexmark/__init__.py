"""Nexmark, the auction workload stream processors are measured by: its events (people,
auctions, bids), made by ``peer.nexmark.events`` as the reference generator makes them, each
from the configuration (``peer.nexmark.config``) and its event number alone."""
