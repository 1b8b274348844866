"""Unit tests, one folder per package and one file per module under test."""
