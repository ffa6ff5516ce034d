"""The HTTP API (FastAPI). Never imports torch or transformers, directly or indirectly."""
