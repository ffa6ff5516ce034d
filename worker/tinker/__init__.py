"""A Tinker session's host (docs/tinker.md): ``host``, the process of the session's host job
(``gradacc.tinker.placement``), which holds the session's models it claimed and answers their
requests in arrival order; ``calls``, each request's call into the core; ``codec``, the SDK's
protobuf and JSON bodies to the core's types and back."""
