"""Server-Sent Events: the in-process hub and the database reads behind it."""
