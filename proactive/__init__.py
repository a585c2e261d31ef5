"""The proactive engine: follow-up intents, passive triggers, policy, the model gate, the pulse."""
