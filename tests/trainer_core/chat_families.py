"""Chat templates in the style of the families users bring, written here (no hub downloads), each
with a marked twin: the same text, ``{% generation %}`` around what the assistant says and the
end-of-turn token(s) the template closes its turn with. The rule (``trainer_core.data.turns``)
says the marker-free template trains exactly what the twin marks.

Each family keeps the quirk that makes it hard: Qwen2.5's default system turn, Qwen3's empty think
block written into the last assistant turn only, Llama-3.1's header tokens and its date system
turn, Gemma's system folded into the first user turn and its "model" role, Mistral's turns without
headers for the assistant, Phi-3's EOS after a finished conversation. The tokenizer is the built-in
tiny-chat one with the family's special tokens added."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import AddedToken, Tokenizer

from trainer_core.builtin.models import ASSETS

GEN, END = "{% generation %}", "{% endgeneration %}"


@dataclass(frozen=True)
class Family:
    name: str
    marked: str  # the template with its generation markers
    special: tuple[str, ...]  # tokens the family's tokenizer holds whole
    kwargs: dict[str, str]  # what apply_chat_template passes (special_tokens_map)
    end_of_turn: str  # the token that closes an assistant turn (what generation stops at)

    @property
    def unmarked(self) -> str:
        return self.marked.replace(GEN, "").replace(END, "")


QWEN25 = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    + GEN
    + "{{ message['content'] + '<|im_end|>' }}"
    + END
    + "{{ '\\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen3: the last assistant turn after the last user message gets a think block, empty when the
# message has no reasoning; earlier turns are rendered without one.
QWEN3 = (
    "{% set ns = namespace(last_query=-1) %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_query = loop.index0 %}"
    "{% endif %}{% endfor %}"
    "{% for message in messages %}{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' %}{% set reasoning = '' %}"
    "{% if '</think>' in content %}"
    "{% set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "{{ '<|im_start|>assistant\\n' }}" + GEN + "{% if loop.index0 > ns.last_query and "
    "(loop.last or reasoning) %}{{ '<think>\\n' + reasoning + '\\n</think>\\n\\n' }}{% endif %}"
    "{{ content + '<|im_end|>' }}" + END + "{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set rest = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set rest = messages %}{% endif %}"
    "{{ '<|start_header_id|>system<|end_header_id|>\\n\\nCutting Knowledge Date: December 2023"
    "\\n\\n' + system + '<|eot_id|>' }}"
    "{% for message in rest %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    + GEN
    + "{{ message['content'] | trim + '<|eot_id|>' }}"
    + END
    + "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\\n\\n' %}{% set rest = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set rest = messages %}{% endif %}"
    "{% for message in rest %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<start_of_turn>model\\n' }}"
    + GEN
    + "{{ message['content'] | trim + '<end_of_turn>' }}"
    + END
    + "{{ '\\n' }}"
    "{% else %}{{ '<start_of_turn>user\\n' + (prefix if loop.first else '') + "
    "message['content'] | trim + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST]' + message['content'] + '[/INST]' }}"
    "{% else %}" + GEN + "{{ message['content'] + eos_token }}" + END + "{% endif %}{% endfor %}"
)

PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<|assistant|>\\n' }}"
    + GEN
    + "{{ message['content'] + '<|end|>' }}"
    + END
    + "{{ '\\n' }}"
    "{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
FAMILIES = [
    Family("qwen2.5", QWEN25, CHATML_TOKENS, {"eos_token": "<|im_end|>"}, "<|im_end|>"),
    Family(
        "qwen3",
        QWEN3,
        (*CHATML_TOKENS, "<think>", "</think>"),
        {"eos_token": "<|im_end|>"},
        "<|im_end|>",
    ),
    Family(
        "llama-3",
        LLAMA3,
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "<|eot_id|>",
    ),
    Family(
        "gemma",
        GEMMA,
        ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"),
        {"bos_token": "<bos>", "eos_token": "<eos>"},
        "<end_of_turn>",
    ),
    Family(
        "mistral",
        MISTRAL,
        ("<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"),
        {"bos_token": "<s>", "eos_token": "</s>"},
        "</s>",
    ),
    Family(
        "phi-3",
        PHI3,
        ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"),
        {"eos_token": "<|endoftext|>"},
        "<|end|>",
    ),
]


def family_tokenizer(family: Family) -> Tokenizer:
    """The built-in tiny-chat tokenizer with the family's special tokens held whole."""
    tokenizer = Tokenizer.from_file(str(ASSETS / "tiny-chat-tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in family.special])
    return tokenizer


def _turns(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"role": role, "content": content} for role, content in pairs]


def conversations() -> list[list[dict[str, Any]]]:
    """Multi-turn conversations with and without system prompts, with weight-0 turns, one whose
    last answer carries reasoning, one of a single exchange."""
    weighted = _turns(("system", "You add numbers."), ("user", "2+2?"), ("assistant", "4"),
                      ("user", "And 3+5?"), ("assistant", "It is 8."))  # fmt: skip
    weighted[2]["weight"] = 0
    plain = _turns(("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "7*6?"),
                   ("assistant", "42"), ("user", "Thanks"), ("assistant", "You are welcome."))  # fmt: skip
    plain[3]["weight"] = 0
    reasoning = _turns(("system", "Think first."), ("user", "1+1?"),
                       ("assistant", "<think>\none and one\n</think>\n\n2"))  # fmt: skip
    single = _turns(("user", "Say yes."), ("assistant", "Yes."))
    return [weighted, plain, reasoning, single]
