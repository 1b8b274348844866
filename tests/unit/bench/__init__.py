"""Unit tests of `bench`: every benchmark module imports and answers --help; the shared helpers."""
