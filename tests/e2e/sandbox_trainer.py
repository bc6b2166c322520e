"""A trainer process that starts a sandbox, sets a command running in it, prints the ids and waits to be killed.

``python sandbox_trainer.py EXP LIFETIME_S`` (the local stack's environment comes from the parent).
"""

import json
import sys
import time

from trainer_client.sandbox import SandboxClient


def main() -> None:
    experiment, lifetime = sys.argv[1], float(sys.argv[2])
    sandbox = SandboxClient.for_experiment(experiment).start(timeout=lifetime, input_id="killed-trainer")
    handle = sandbox.exec(["sleep", "600"], background=True)
    print(json.dumps({"session_id": sandbox.session_id, "deadline_at": sandbox.deadline_at}), flush=True)
    sandbox.get_exec(handle.invocation_id).status()  # mid-episode: the command runs, the trainer is in a call loop
    time.sleep(600)


if __name__ == "__main__":
    main()
