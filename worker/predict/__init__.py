"""A worker's predict server: a process of its own (torch, the models). One engine (``engine``:
the model cache, ``cache``, and the batcher, ``batcher`` + ``decode`` + ``generation``) answers
two ways in: OpenAI's chat and text completions over HTTP (``openai``: the endpoint, one request's
run, the sampling and answer shapes), and ``POST /v1/jobs/{id}/predict`` through the predictions
table (``server``: its loop; a causal LM's request runs as a completion, a classifier's through
``classify``). ``render``: a chat template rendered under limits. ``reply``, ``deltas``,
``tool_calls``: what a client is sent. ``failpoints``: test-only switches."""
