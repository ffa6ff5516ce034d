"""Answering with a loaded model the way ``transformers.pipeline`` does: softmax over a
classifier's logits per input; a causal LM's greedy (or sampled, with ``temperature``)
continuation of a prompt or a chat, decoded without special tokens (a row of the batcher, the
OpenAI endpoint's path)."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.data.chat_tools import template_messages
from trainer_core.spec.fields import MAX_TEMPLATE_CHARS
from worker.predict.batcher import Batcher, choices
from worker.predict.cache import Loaded
from worker.predict.generation import Sampling
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


def chat_prompt(tokenizer: Any, messages: list[dict[str, Any]], limits: RenderLimits,
                tools: list[dict[str, Any]] | None = None) -> str:  # fmt: skip
    """What ``apply_chat_template`` makes of the conversation (and ``tools``), rendered under
    ``limits``: the template is the model's, so the tenant's (``worker.predict.render``). A tool
    call's ``arguments`` reach it as the object they encode, as in training
    (``trainer_core.data.chat_tools``), so a conversation renders as it was trained."""
    template = tokenizer.chat_template
    if isinstance(template, str) and len(template) > MAX_TEMPLATE_CHARS:
        raise RenderRefused(f"the model's chat template is over {MAX_TEMPLATE_CHARS} characters")
    shown = template_messages(messages)

    def render() -> str:
        return str(tokenizer.apply_chat_template(shown, tools=tools or None, tokenize=False,
                                                 add_generation_prompt=True))  # fmt: skip

    return render_limited(render, limits)


def generate(batcher: Batcher, loaded: Loaded, request: dict[str, Any], limits: RenderLimits,
             *, deadline: float) -> dict[str, Any]:  # fmt: skip
    """One row of the batcher (the OpenAI endpoint's path): greedy, or sampled with
    ``temperature`` from the request's ``seed`` (0 unless given)."""
    tokenizer = loaded.tokenizer
    messages = request.get("messages")
    if messages is not None:
        text = chat_prompt(tokenizer, messages, limits)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        ids = list(tokenizer(request["prompt"])["input_ids"])
    sampling = Sampling(max_tokens=int(request.get("max_new_tokens", 64)),
                        temperature=float(request.get("temperature", 0.0)))  # fmt: skip
    rows = choices(loaded, ids, sampling, seed=int(request.get("seed", 0)), deadline=deadline)
    (done,) = batcher.complete(rows)
    if done.timed_out:
        raise TimeoutError("the generation ran past its deadline (GRADACC_PREDICT_TIMEOUT_S)")
    answer: dict[str, Any] = {"text": done.text}
    if messages is not None:
        answer["message"] = {"role": "assistant", "content": done.text}
    return answer
