"""Real architectures without their weights: the configs of Qwen3 (0.6B, 1.7B, 8B) and Llama-3.1
(8B, 70B), as their Hugging Face config files state them, offered as built-in models
(``builtin:qwen3-0.6b-shape``...) initialised at random from the job's seed. They are for tests,
benchmarks and the memory plan (``trainer_core.spec.memory``): the shapes, the vocabularies and
the parameter counts of the models teams bring, on a machine without the hub. Their tokenizer is
``builtin:tiny-chat``'s (ChatML; its ids are a few thousand, so they fit any of these
vocabularies): they learn nothing worth serving. Torch-free: the API plans with them."""

from __future__ import annotations

from typing import Any

_QWEN3 = {
    "model_type": "qwen3",
    "vocab_size": 151_936,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40_960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "hidden_act": "silu",
    "attention_bias": False,
}
_LLAMA_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

# A table: each row a config file's fields, as Qwen's and Meta's repositories publish them.
SHAPES: dict[str, dict[str, Any]] = {
    "builtin:qwen3-0.6b-shape": _QWEN3 | {"hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 28, "num_attention_heads": 16, "tie_word_embeddings": True},
    "builtin:qwen3-1.7b-shape": _QWEN3 | {"hidden_size": 2048, "intermediate_size": 6144,
        "num_hidden_layers": 28, "num_attention_heads": 16, "tie_word_embeddings": True},
    "builtin:qwen3-8b-shape": _QWEN3 | {"hidden_size": 4096, "intermediate_size": 12_288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "tie_word_embeddings": False},
    "builtin:llama-3.1-8b-shape": {"model_type": "llama", "vocab_size": 128_256,
        "hidden_size": 4096, "intermediate_size": 14_336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 131_072, "rms_norm_eps": 1e-5, "rope_theta": 500_000.0,
        "rope_scaling": _LLAMA_ROPE, "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False},
    "builtin:llama-3.1-70b-shape": {"model_type": "llama", "vocab_size": 128_256,
        "hidden_size": 8192, "intermediate_size": 28_672, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 131_072, "rms_norm_eps": 1e-5, "rope_theta": 500_000.0,
        "rope_scaling": _LLAMA_ROPE, "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False},
}  # fmt: skip
