"""builtin:small-chat, the chat model for a newcomer's first job: its subword tokenizer (trained on
its corpus) spends a word a piece where tiny-chat spends a letter, and its context holds an
application's 200-word system prompt with a conversation, where tiny-chat's 512 positions do not;
the model it builds has that context."""

from __future__ import annotations

from trainer_core.builtin.chat_corpus import LONG_SYSTEM_PROMPT
from trainer_core.builtin.models import builtin_config, builtin_tokenizer

CONVERSATION = [
    {"role": "system", "content": LONG_SYSTEM_PROMPT},
    {"role": "user", "content": "what is 12 plus 5?"},
    {"role": "assistant", "content": "12 plus 5 is 17."},
    {"role": "user", "content": "and minus 3?"},
]


def _tokens(name: str) -> int:
    tokenizer = builtin_tokenizer(name)
    text = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_a_real_system_prompt_fits_small_chat_and_not_tiny_chat() -> None:
    assert len(LONG_SYSTEM_PROMPT.split()) >= 200
    small, tiny = _tokens("builtin:small-chat"), _tokens("builtin:tiny-chat")
    small_context = builtin_config("builtin:small-chat", builtin_tokenizer("builtin:small-chat"))
    tiny_context = builtin_config("builtin:tiny-chat", builtin_tokenizer("builtin:tiny-chat"))
    assert small <= small_context.n_positions // 4  # room for a long conversation after it
    assert tiny > tiny_context.n_positions  # the first job a newcomer ran failed here
    assert small * 3 < tiny  # pieces of words, not letters


def test_its_pieces_decode_to_the_text() -> None:
    tokenizer = builtin_tokenizer("builtin:small-chat")
    ids = tokenizer(LONG_SYSTEM_PROMPT)["input_ids"]
    assert tokenizer.decode(ids) == LONG_SYSTEM_PROMPT
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
