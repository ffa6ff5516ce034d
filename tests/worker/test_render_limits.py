"""The predict server renders a model's chat template in a forked child under limits: a template
that loops is stopped at GRADACC_PREDICT_RENDER_TIMEOUT_S, one that allocates gigabytes runs out
of its GRADACC_PREDICT_RENDER_MEMORY_MB, one that renders megabytes is refused, an over-long
template is refused before rendering; the server's own process is untouched by any of them, and
a plain template renders exactly what ``apply_chat_template`` does."""

from __future__ import annotations

import pytest

from trainer_core.builtin.models import builtin_tokenizer
from trainer_core.spec.chat import CHATML_TEMPLATE
from worker.predict.render import RenderLimits, RenderRefused, chat_prompt

LIMITS = RenderLimits(timeout_s=2.0, memory_bytes=256 * 2**20)
MESSAGES = [{"role": "user", "content": "boom"}]
LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def _tokenizer(trap: str) -> object:
    """tiny-chat's tokenizer with ChatML that runs ``trap`` when the last message is 'boom'."""
    tokenizer = builtin_tokenizer("builtin:tiny-chat")
    trigger = "{%- if messages[-1]['content'] == 'boom' -%}" + trap + "{%- endif -%}"
    tokenizer.chat_template = trigger + CHATML_TEMPLATE
    return tokenizer


@pytest.mark.parametrize(
    ("trap", "refusal"),
    [
        (LOOP, "did not render within 2 s (GRADACC_PREDICT_RENDER_TIMEOUT_S)"),
        ('{%- set s = "A" * 2000000000 -%}{{ s|length }}', "GRADACC_PREDICT_RENDER_MEMORY_MB"),
        ('{{ "A" * 6000000 }}', "rendered more than"),
        ("{{ raise_exception('no') }}", "TemplateError: no"),
    ],
)
def test_a_template_past_a_limit_fails_its_render_only(trap: str, refusal: str) -> None:
    tokenizer = _tokenizer(trap)
    with pytest.raises(RenderRefused, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        chat_prompt(tokenizer, MESSAGES, LIMITS)
    # Without the trigger the same template renders ChatML. (Never rendered here, in the test's
    # own process: even compiling the trap folds its constants, the 2 GB string included.)
    quiet = [{"role": "user", "content": "2 plus 3?"}]
    plain = builtin_tokenizer("builtin:tiny-chat")
    expected = plain.apply_chat_template(quiet, add_generation_prompt=True, tokenize=False)
    assert chat_prompt(tokenizer, quiet, LIMITS) == expected


def test_an_over_long_template_is_refused_before_rendering() -> None:
    tokenizer = _tokenizer("{# " + "x" * 70_000 + " #}")
    with pytest.raises(RenderRefused, match="over 65536 characters"):
        chat_prompt(tokenizer, MESSAGES, LIMITS)
