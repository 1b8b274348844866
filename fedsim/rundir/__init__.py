"""The run directory: everything one run (or one sweep) leaves on disk, and the only code that touches it.

* ``layout``: where everything lies: every file and folder of a run directory and a sweep directory,
  named once (imports nothing of the project, so the clients read it too);
* ``writer``: ``RunStore``, which claims a run directory and writes the config, its fingerprint, the
  environment, the metrics log, the checkpoints and the summary, and reopens a killed run to resume it;
* ``commits``: the commit record, one line per committed round with its checkpoint's and rows' checksums;
* ``verify``: which round ``--resume`` restarts after, once the checkpoint and rows agree with that record;
* ``lock``: one writer per run directory: the process writing a run holds ``run.lock`` for the run's life;
* ``reader``: ``load_run`` and ``load_sweep``, the run and sweep directories as DataFrames
  (``fedsim.load_run``, reports and notebooks);
* ``privacy``: the epsilons a run spent, example-level and client-level apart, read from its rows
  (``summary.json``, ``Run.privacy()`` and the reports);
* ``ground_truth``: what each client really trained on, written by the clients, read by scoring only;
* ``backlog``: the adversary's tapped updates of a round, kept until every attack on them is scored.

This ``__init__`` imports nothing: a client importing ``fedsim.rundir.layout`` must not pull in the writer.
"""
