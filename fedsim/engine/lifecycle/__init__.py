"""The run lifecycle: one experiment from its data to its summary, round by round.

* ``runner``: runs one experiment (data, model, strategy, adversary, the Flower simulation or another engine);
* ``rounds``: the round driver shared by every protocol (roll call, resume, rows, checkpoints, progress);
* ``protocols``: picks a strategy's protocol, with its client app and taps, by the strategy's ``protocol``;
* ``message_protocol`` and ``secagg_protocol``: one round on Flower's Message API, one SecAgg+ round;
* ``federation``: the data side (the data set, each client's partition and normalisation);
* ``ray_resources``: the Ray instance sized without the attack workers' CPUs and GPU shares;
* ``summary``: the run's ``summary.json`` from its rows, and the check that some round trained;
* ``progress``: the live display or log lines;
* ``network``: the addresses of a SuperLink or a Ray cluster, parsed and probed before use.
"""
