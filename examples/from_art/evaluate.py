"""An ART evaluation script after its move (docs/migrating.md, "From ART"): a dataset through ``run_batch``.

ART's version built ``RolloutClient(agent_runtime_arn, s3_bucket, exp_id, tps_limit=...)`` from command-line
flags; here the experiment's descriptor supplies the runtime, bucket and queues, and ``--run`` is the label
ART's ``exp_id`` was. Prints one JSON line: rollouts, succeeded, accuracy (mean reward), where the results are;
warnings only on stderr (``--verbose``: INFO lines too).

    python examples/from_art/evaluate.py --experiment gsm8k --run qwen3-eval --dataset ds.jsonl --model_id m
"""

from __future__ import annotations

import argparse
import json
import logging

from trainer_client import RolloutClient, read_dataset


def main() -> None:
    """Run every row of ``--dataset`` once and print the accuracy."""
    parser = argparse.ArgumentParser(description="Evaluate a GSM8K agent on an agentcore-rollouts experiment")
    parser.add_argument("--experiment", required=True, help="the deployed experiment")
    parser.add_argument("--run", help="this run's label (ART's exp_id); results go under EXPERIMENT/RUN/")
    parser.add_argument("--dataset", required=True, help="JSONL of {prompt, answer} rows")
    parser.add_argument("--base_url", help="model endpoint (default: the experiment's token gateway)")
    parser.add_argument("--model_id", required=True)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max_concurrent", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--verbose", action="store_true", help="log the SDK's and botocore's INFO lines too")
    args = parser.parse_args()
    # Quiet by default: stdout is the one JSON line; botocore and httpx log every credential lookup and call at INFO.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, force=True)

    rows = read_dataset(args.dataset)
    with RolloutClient.for_experiment(
        args.experiment,
        run=args.run,
        base_url=args.base_url,
        model_id=args.model_id,
        sampling_params={"temperature": args.temperature},
    ) as client:
        rewards, succeeded = [], 0
        for item in client.run_batch(rows, max_concurrent_sessions=args.max_concurrent, timeout=args.timeout):
            succeeded += item.success
            reward = item.result.reward if item.success and item.result is not None else None
            rewards.append(reward or 0.0)
        summary = {
            "rollouts": len(rewards),
            "succeeded": succeeded,
            "accuracy": sum(rewards) / len(rewards) if rewards else 0.0,
            "results": f"s3://{client.s3_bucket}/{client.exp_id}/",
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
