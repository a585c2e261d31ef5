"""Inline context suggestions: the finder, the block under a reply, feedback and self-tuning."""
