"""Reporters: each renders the same Report, none judges anything."""
