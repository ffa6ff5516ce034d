"""What wraps every request, in main.py's order: authentication, the schema gate, the body limit,
timing, and the OpenAPI document and its docs pages."""
