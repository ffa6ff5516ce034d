"""OpenAI's chat and text completions on the predict server: ``server`` (the HTTP endpoint the API
forwards to), ``run`` (one request: its prompt, its sampling, its rows in the batcher, answered
whole or streamed; ``/predict``'s generations go through it too), ``protocol`` (the request's
sampling, built in one place, and the answer's and stream's shapes)."""
