"""Iris: a self-hosted, proactive multi-channel chat assistant gateway."""

__version__ = "0.1.0"
