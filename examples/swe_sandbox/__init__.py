"""A SWE-style example on sandbox sessions: the trainer's agent loop fixes a repository in a sandbox.

- :mod:`~examples.swe_sandbox.tasks`: three tiny repository snapshots, each with a failing test, and the edits a
  scripted policy may propose (the right one among wrong ones).
- :mod:`~examples.swe_sandbox.loop`: one episode: copy the snapshot into a sandbox, run the tests, apply the
  policy's edit, run the tests again; reward = the fraction of tests passing.
- ``python -m examples.swe_sandbox``: GRPO groups of episodes, each in its own sandbox (on a local sandbox stack
  it starts, or on ``--experiment NAME``); prints each group's rewards and advantages.
"""
