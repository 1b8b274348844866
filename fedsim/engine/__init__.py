"""The engine: the layer that runs an experiment, and the only one that may import every other.

Three subpackages, one job each:

* ``lifecycle``: one run from start to summary: the runner, the round driver and the protocols that play
  a round (Message API, SecAgg+), the federation's data, Ray sizing, progress and service addresses;
* ``leakage``: what the adversary attacks and how its results are scored: the attack portfolio, the
  adversary's wiring into the server, and the scorer that alone reads the ground truth;
* ``deployment``: the same run on a SuperLink: fedsim as a Flower App, its run config, the submitting
  side of ``--engine deployment`` and a local federation to try it.

Beside them, ``audit`` wires ``adversary.audit`` (the one-run privacy audit) into a run.

``adversary/``, ``clients/`` and ``strategies/`` never import it.
"""
