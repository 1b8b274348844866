"""One-run privacy auditing: canaries inserted with probability 1/2, scored from what a threat model sees, and
the lower bound on epsilon their guesses prove (``bound``), beside the accountant's upper bound.

``config`` holds ``adversary.privacy_audit``; ``canaries`` what is inserted; ``scores`` how each canary is scored;
``bound`` the bound; ``auditor`` a run's audit (``fedsim.engine.privacy_audit`` wires it into a run).
"""
