"""Simulations: real federations on Ray or a local SuperLink, tens of seconds each."""
