"""The engine: the layer that runs an experiment, and the only one that may import every other.

The composition roots take a run's config apart and put its pieces together: ``run`` (``fedsim run``),
``app_audit`` (``fedsim audit``: an unedited Flower app under the adversary) and ``deployment`` (the same run
on a SuperLink: fedsim as a Flower App, its run config, the submitting side of ``--engine deployment`` and a
local federation to try it), with ``assembly`` (the taking apart) and ``session`` (``RunSession``, the one
run skeleton they share: the run directory, the adversary and the privacy audit attached, rounds committed,
the summary).

Below them the components, each handed the sections and values it reads:

* ``lifecycle``: the round driver and the protocols that play a round (Message API, SecAgg+), Flower's
  simulation engine, the federation's data, the server's evaluation, Ray sizing, progress and the summary;
* ``leakage``: what the adversary attacks and how its results are scored: the attack portfolio, the
  adversary's wiring into the server, the rehearsal that tunes attacks, and the scorer that alone reads the
  ground truth;
* ``privacy_audit``: ``adversary.privacy_audit`` (the one-run privacy audit) wired into a run.

``adversary/``, ``clients/`` and ``strategies/`` never import it.
"""
