"""Our names and files in OpenAI's shapes: the results file."""
