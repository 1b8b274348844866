"""Leakage scheduling and scoring: which attacks a run runs, how they reach the server, how they are scored.

* ``portfolio``: each configured attack's requirements checked against the run, the kept ones adapted to
  the defenses in force;
* ``wiring``: the adversary built for one run and plugged into its server (wire tap, server tap or
  malicious server), with the attack backlog and the scorer's callbacks;
* ``scoring``: pairs each reconstruction with what the clients really trained on (the one place that reads
  both) and records rows, grids and trajectories.
"""
