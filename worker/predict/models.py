"""Answering with a loaded model the way ``transformers.pipeline`` does: softmax over a
classifier's logits per input; a causal LM's greedy (or sampled, with ``temperature``)
continuation of a prompt or a chat, decoded without special tokens."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.spec.fields import MAX_TEMPLATE_CHARS
from worker.predict.cache import Loaded
from worker.predict.render import RenderLimits, RenderRefused, render_limited


@torch.inference_mode()
def classify(loaded: Loaded, inputs: list[str], max_length: int) -> dict[str, Any]:
    """One input at a time, as the pipeline runs them (no padding between inputs)."""
    names = loaded.model.config.id2label
    data = []
    for text in inputs:
        encoded = loaded.tokenizer(text, truncation=True, max_length=max_length,
                                   return_tensors="pt").to(loaded.device)  # fmt: skip
        probs = loaded.model(**encoded).logits[0].float().softmax(-1).cpu()
        best = int(probs.argmax())
        scores = {names[i]: float(p) for i, p in enumerate(probs)}
        data.append({"label": names[best], "score": float(probs[best]), "scores": scores})
    return {"object": "list", "data": data}


def chat_prompt(tokenizer: Any, messages: list[dict[str, str]], limits: RenderLimits) -> str:
    """What ``apply_chat_template`` makes of the conversation, rendered under ``limits``: the
    template is the model's, so the tenant's (``worker.predict.render``)."""
    template = tokenizer.chat_template
    if isinstance(template, str) and len(template) > MAX_TEMPLATE_CHARS:
        raise RenderRefused(f"the model's chat template is over {MAX_TEMPLATE_CHARS} characters")

    def render() -> str:
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=False))  # fmt: skip

    return render_limited(render, limits)


@torch.inference_mode()
def generate(loaded: Loaded, request: dict[str, Any], limits: RenderLimits) -> dict[str, Any]:
    tokenizer, model = loaded.tokenizer, loaded.model
    messages = request.get("messages")
    if messages is not None:
        text = chat_prompt(tokenizer, messages, limits)
        encoded = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    else:
        encoded = tokenizer(request["prompt"], return_tensors="pt")
    ids = encoded["input_ids"].to(loaded.device)
    temperature = float(request.get("temperature", 0.0))
    torch.manual_seed(int(request.get("seed", 0)))
    sampling: dict[str, Any] = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": temperature}
    out = model.generate(
        input_ids=ids,
        attention_mask=encoded["attention_mask"].to(loaded.device),
        max_new_tokens=int(request.get("max_new_tokens", 64)),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    reply = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    answer: dict[str, Any] = {"text": reply}
    if messages is not None:
        answer["message"] = {"role": "assistant", "content": reply}
    return answer
