"""The CDK app: ``npx cdk deploy`` (shared stack) and ``npx cdk deploy -c experiment=NAME -c image_tag=TAG``.

- ``app``: the entry point; the only module that reads CDK context and the environment.
- ``settings``: :class:`~infra.settings.ExperimentSettings` and the ``-c`` flag parser.
- ``shared_stack``: ECR repository, results bucket, budget table (deployed once per account and region).
- ``experiment_stack``: one experiment's runtime, queues, rule, table, Lambdas, dashboard, trainer role.
- constructs, one per concern: ``results_bucket``, ``queues``, ``routing``, ``runtime``, ``functions`` (the
  function package and one function), ``workers`` (the three functions, triggers, grants),
  ``trainer_access``, ``monitoring``.
- ``nag``: cdk-nag 3.x registration and justified acknowledgements (for both synth modes).

Nothing is imported here, so ``import infra.settings`` stays free of the CDK.
"""
