"""The Flower ClientApp, local training and (later) defenses."""
