"""The test suite: unit tests mirror the packages under tests/unit, Ray/Flower runs sit apart in tests/simulation."""
