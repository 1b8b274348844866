"""Deployment: the same experiment on a Flower SuperLink and its SuperNodes instead of the simulation.

* ``app``: fedsim as a Flower App (the ``server_app`` and ``client_app`` ``pyproject.toml`` names);
* ``run_config``: the experiment as a Flower run config, and back;
* ``submit``: the submitting side of ``fedsim run --engine deployment`` (``flwr run``, then wait);
* ``local_federation``: a SuperLink and SuperNodes on this machine, to try the above.
"""
