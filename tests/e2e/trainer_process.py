"""A second trainer process for the end-to-end tests.

``python trainer_process.py EXP PREFIX N [--sleep S] [--journal F] [--no-wait] [--lease S]``

Submits ``N`` rollouts with input ids ``PREFIX-<i>`` through ``RolloutClient.for_experiment`` (the local stack's
environment comes from the parent), then either waits and prints one JSON line per result, or (``--no-wait``)
exits at once without closing its client, as a trainer that crashed or was restarted would (its trainer lease,
``--lease`` seconds, then runs out).
"""

import argparse
import json
import sys

from trainer_client import PollSettings, RolloutClient


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("exp")
    parser.add_argument("prefix")
    parser.add_argument("count", type=int)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--journal")
    parser.add_argument("--no-wait", action="store_true")
    parser.add_argument("--lease", type=float, default=PollSettings().lease_s)
    args = parser.parse_args()
    client = RolloutClient.for_experiment(args.exp, poll=PollSettings(wait_time_s=1, lease_s=args.lease))
    payloads = [({"action": "succeed", "sleep_s": args.sleep}, f"{args.prefix}-{i}") for i in range(args.count)]
    futures = client.submit(payloads, timeout=60, journal=args.journal)
    if args.no_wait:
        return 0
    for future in futures:
        result = future.result(timeout=90)
        print(json.dumps({"session_id": result.session_id, "input_id": result.input_id, "status": result.status}))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
