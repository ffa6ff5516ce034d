"""The Tinker API's shared part (docs/tinker.md): its tables (``tables``), the model names a
client uses (``names``), the queue of a model's requests and their futures (``queue``), and the
``tinker://`` paths of checkpoints (``paths``). The API enqueues; a worker's Tinker host
(``worker.tinker``) holds the models and answers the requests in order."""
