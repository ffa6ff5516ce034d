"""Pydantic request and response bodies: our jobs, OpenAI's shapes, predict."""
