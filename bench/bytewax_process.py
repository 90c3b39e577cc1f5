"""One process of a Bytewax cluster running a baseline flow (bench/baselines.py), one worker.

Started by ``baselines.bytewax_cluster_rate``, one per process: it builds the flow, prints
``ready``, waits for a line on stdin, joins the cluster with ``bytewax._bytewax.cluster_main``
(what ``python -m bytewax.run -i N -a ADDRESSES`` calls) and, when the flow ends, prints one JSON
document on its last line: what its partitions saw (``baselines.Seen``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.baselines import KINDS, bytewax_flow  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument(
        "--addresses", required=True, help="host:port of every process, ;-separated"
    )
    parser.add_argument("--kind", choices=KINDS, default="rows")
    parser.add_argument("--segments", type=int, required=True)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--recovery", type=Path, required=True)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    args = parser.parse_args()
    from bytewax._bytewax import cluster_main  # noqa: PLC0415
    from bytewax.recovery import RecoveryConfig  # noqa: PLC0415

    addresses = args.addresses.split(";")
    flow, seen = bytewax_flow(args.kind, args.segments, len(addresses), args.batch)
    print("ready", flush=True)
    sys.stdin.readline()
    cluster_main(flow, addresses, args.process_id,
                 epoch_interval=timedelta(seconds=args.snapshot_interval),
                 recovery_config=RecoveryConfig(args.recovery))  # fmt: skip
    print(json.dumps(asdict(seen)))


if __name__ == "__main__":
    main()
