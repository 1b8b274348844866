"""The engine: the layer that runs an experiment, and the only one that may import every other.

``rounds`` is the round driver (roll call, sampling, commit, checkpoints, rows, progress, resume),
``message_protocol`` and ``secagg_protocol`` play one round each on their protocol, and ``protocols``
picks them (with the matching client app and taps) by the strategy's ``protocol``. ``adversary/``,
``clients/`` and ``strategies/`` never import it.
"""
