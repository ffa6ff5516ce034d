"""A worker's Tinker host (docs/tinker.md): ``host``, a process the worker's consumer starts
(``worker.consumer.tinker_runner``) that holds the models it claimed and answers their requests in
arrival order; ``calls``, each request's call into the core; ``codec``, the SDK's protobuf and JSON
bodies to the core's types and back."""
