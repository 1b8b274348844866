"""Unit tests of the judge: scoring, metrics, the floor and the verdict."""
