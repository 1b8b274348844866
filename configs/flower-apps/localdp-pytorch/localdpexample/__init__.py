"""localdpexample: a Flower / PyTorch app whose clients send their updates through Flower's LocalDpMod."""
