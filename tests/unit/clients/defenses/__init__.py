"""Unit tests of `clients.defenses`."""
