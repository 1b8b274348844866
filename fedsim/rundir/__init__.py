"""The run directory: its writer (``writer``), its reader for notebooks and reports (``reader``), the ground truth
kept for scoring (``ground_truth``) and the attacks still owed (``backlog``)."""
