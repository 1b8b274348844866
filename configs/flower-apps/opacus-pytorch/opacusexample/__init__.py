"""opacusexample: a Flower / PyTorch app training with DP-SGD through Opacus."""
