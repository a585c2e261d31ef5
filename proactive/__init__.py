"""Proactive follow-ups: policy, gate, execution engine, the model's tools, commands, simulator."""
