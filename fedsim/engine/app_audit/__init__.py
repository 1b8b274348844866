"""``fedsim audit``: an existing Flower app, unedited, run under Flower's simulation engine with fedsim's adversary.

* ``app``: the app's folder read as Flower reads it (``pyproject.toml``'s components and run config), its
  ServerApp and ClientApp loaded, and a one-line refusal for what is not supported;
* ``config``: the audit config (the attacker's knowledge of the app, the app's data function for scoring) turned
  into the fedsim config the run directory records;
* ``classes``: the app's number of classes, from its model's outputs (a small partition may lack a class);
* ``grid``: the tapped grid the app's ServerApp receives: it forwards every message unchanged and copies the
  updates a position sees to the adversary, and writes the scoring side's ground truth beside them;
* ``dp``, ``dp_watch``, ``client_probe``: the app's DP found where it acts, recorded, and checked against its claims;
  ``dry_probe``: a dry call of the app's first round before the run, so that the attacks adapt to that DP;
* ``workdir``: the app's own working directory inside the run directory, and fedsim's paths made absolute;
* ``runner``: the audit itself, from the app's folder to a run directory of fedsim's.
"""
