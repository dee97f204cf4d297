"""Start, stop and inspect the private development PostgreSQL cluster.

    python dev/pg.py start|stop|status|url [--port N] [--wal-level logical|replica]

The port defaults to ``PGSYNC_DEV_PORT`` (54329); data lives in ``.dev/pg``.
"""

from __future__ import annotations

import argparse
import sys

from pgcluster import dev_cluster


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev/pg.py", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status", "url"])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--wal-level", default="logical", choices=["logical", "replica"])
    args = parser.parse_args(argv)
    cluster = dev_cluster(args.port, args.wal_level)
    if args.action == "start":
        cluster.start()
        print(f"PostgreSQL running: {cluster.url('postgres')} (data {cluster.datadir})")
    elif args.action == "stop":
        cluster.stop()
        print("PostgreSQL stopped")
    elif args.action == "status":
        state = "running" if cluster.running() else "stopped"
        print(f"PostgreSQL {state}: {cluster.url('postgres')} (data {cluster.datadir})")
        return 0 if state == "running" else 3
    else:
        print(cluster.url("postgres"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
