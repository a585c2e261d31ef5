"""Team knowledge: documents indexed into the vault and injected into the context by relevance,
under refresh policies, with an injection audit and `/context` built from the request's trace."""
