"""The job's model: loading it and its tokenizer (``load``), LoRA adapters (``lora``), the
optimizer and scheduler (``optim``) and mixed precision (``precision``)."""
