"""secaggexample: a Flower / PyTorch app with Secure Aggregation (SecAgg+), on the legacy NumPyClient API."""
