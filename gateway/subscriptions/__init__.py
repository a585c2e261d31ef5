"""Context subscriptions: patterns watched for other systems, delivered by webhook, SSE or poll."""
