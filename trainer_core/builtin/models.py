"""Built-in tiny models: configs with no dropout and tokenizers shipped in ``assets/``.

The tokenizers were trained on the built-in corpus by ``python -m trainer_core.builtin.make_assets``
and are committed, so a run needs no network and gives the same ids on every machine.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    AutoConfig,
    BertConfig,
    GPT2Config,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from trainer_core.spec.chat import CHATML_TEMPLATE
from trainer_core.spec.shapes import SHAPES

ASSETS = Path(__file__).parent / "assets"
MAX_POSITIONS = 512
# builtin:small-chat, the chat model a newcomer trains first (`make run`, the README): a subword
# tokenizer (1,061 pieces: whole words of its corpus) and a context of 2,048 tokens, which holds a
# real system prompt (chat_corpus.LONG_SYSTEM_PROMPT, 209 words: 239 of its tokens, 903 of
# tiny-chat's), still small enough to learn arithmetic on a CPU in a few epochs.
SMALL_CHAT = "builtin:small-chat"
SMALL_CHAT_POSITIONS = 2048
CHAT_SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>"]  # ChatML's turn markers, single tokens


def builtin_tokenizer(name: str) -> PreTrainedTokenizerBase:
    if name == SMALL_CHAT:
        return _chatml("small-chat-tokenizer.json", SMALL_CHAT_POSITIONS)
    if name == "builtin:tiny-chat" or name in SHAPES:
        return _chatml("tiny-chat-tokenizer.json", MAX_POSITIONS)
    if name == "builtin:tiny-bert":
        return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
            tokenizer_file=str(ASSETS / "tiny-bert-tokenizer.json"),
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=MAX_POSITIONS,
        )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_file=str(ASSETS / "tiny-gpt2-tokenizer.json"),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",  # GPT-2 has no pad token; padded positions are masked anyway
        model_max_length=MAX_POSITIONS,
    )


def _chatml(asset: str, positions: int) -> PreTrainedTokenizerBase:
    """ChatML with generation markers and function calling (spec.chat.CHATML_TEMPLATE); a turn
    ends with <|im_end|>, which is also what generation stops at (its EOS)."""
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_file=str(ASSETS / asset),
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=CHAT_SPECIAL_TOKENS,
        chat_template=CHATML_TEMPLATE,
        model_max_length=positions,
    )


def builtin_config(name: str, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    """Configs of well under 1M parameters, with every dropout at zero (runs compare bit for bit);
    a shape's config as its model's repository states it (``spec.shapes``), with the tokenizer's
    special tokens."""
    if name in SHAPES:
        fields = dict(SHAPES[name])
        ids = {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
        return AutoConfig.for_model(fields.pop("model_type"), **fields, **ids)
    if name == "builtin:tiny-bert":
        return BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=MAX_POSITIONS,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            classifier_dropout=0.0,
            pad_token_id=tokenizer.pad_token_id,
        )
    if name == SMALL_CHAT:
        return _gpt2(tokenizer, SMALL_CHAT_POSITIONS, width=128, layers=4)
    chat = name == "builtin:tiny-chat"  # a little wider: it learns arithmetic in a demo's epochs
    return _gpt2(tokenizer, MAX_POSITIONS, width=64 if chat else 32, layers=2)


def _gpt2(
    tokenizer: PreTrainedTokenizerBase, positions: int, *, width: int, layers: int
) -> GPT2Config:
    """A GPT-2 of ``layers`` blocks (as many heads) with every dropout at zero."""
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=positions,
        n_embd=width,
        n_layer=layers,
        n_head=layers,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        summary_first_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
