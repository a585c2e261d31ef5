"""Channel adapters: one module per platform, translating at the edge."""
