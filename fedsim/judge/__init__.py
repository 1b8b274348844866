"""The judge: what scores an attack's output against the ground truth the attacker never saw.

Scoring (``scoring``, ``metrics``, ``matching``, ``text_scoring``), the test behind every verdict (``floor``,
``text_floor``, ``verdict``), the images a report shows (``images``) and the reconstruction vulnerability metric
(``vulnerability``). The engine and the reports import it; the attacker's side (``adversary/``) and the clients
never do: nothing an attack computes can depend on the truth.
"""
