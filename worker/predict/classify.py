"""A classifier's answer to ``/v1/jobs/{id}/predict``, the way ``transformers.pipeline`` answers:
the softmax of its logits, per input, with every label's score. (A causal LM's ``/predict`` is a
chat or text completion: ``worker.predict.openai.run.predict_generation``.)"""

from __future__ import annotations

from typing import Any

import torch

from worker.predict.cache import Loaded


@torch.inference_mode()
def classify(loaded: Loaded, inputs: list[str], max_length: int) -> dict[str, Any]:
    """One input at a time, as the pipeline runs them (no padding between inputs)."""
    names = loaded.model.config.id2label
    data = []
    for text in inputs:
        encoded = loaded.tokenizer(
            text, truncation=True, max_length=max_length, return_tensors="pt"
        ).to(loaded.device)
        probs = loaded.model(**encoded).logits[0].float().softmax(-1).cpu()
        best = int(probs.argmax())
        scores = {names[i]: float(p) for i, p in enumerate(probs)}
        data.append({"label": names[best], "score": float(probs[best]), "scores": scores})
    return {"object": "list", "data": data}
