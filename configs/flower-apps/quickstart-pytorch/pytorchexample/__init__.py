"""pytorchexample: a Flower / PyTorch app."""
