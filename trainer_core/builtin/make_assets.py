"""Regenerate the shipped tokenizers from the built-in corpus: ``python -m trainer_core.builtin.make_assets``."""

from __future__ import annotations

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from trainer_core.builtin.chat_corpus import LONG_SYSTEM_PROMPT, chat_texts
from trainer_core.builtin.corpus import all_texts
from trainer_core.builtin.models import ASSETS, CHAT_SPECIAL_TOKENS


def wordpiece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        all_texts(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=special)
    )
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    # A WordPiece tokenizer built with the tokenizers library adds no [CLS]/[SEP] without one.
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    return tok


def byte_bpe(texts: list[str], vocab_size: int, special: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def small_chat_texts() -> list[str]:
    """builtin:small-chat's tokenizer corpus: the chat corpus, the built-in texts and the long
    system prompt, so its pieces are whole words and numbers where tiny-chat's are letters."""
    return chat_texts() + all_texts() + [f"system\n{LONG_SYSTEM_PROMPT}"] * 20


def main() -> None:
    ASSETS.mkdir(exist_ok=True)
    wordpiece().save(str(ASSETS / "tiny-bert-tokenizer.json"))
    byte_bpe(all_texts(), 384, ["<|endoftext|>"]).save(str(ASSETS / "tiny-gpt2-tokenizer.json"))
    chat = byte_bpe(chat_texts(), 384, ["<|endoftext|>", *CHAT_SPECIAL_TOKENS])
    chat.save(str(ASSETS / "tiny-chat-tokenizer.json"))
    small = byte_bpe(small_chat_texts(), 2048, ["<|endoftext|>", *CHAT_SPECIAL_TOKENS])
    small.save(str(ASSETS / "small-chat-tokenizer.json"))
    print(f"wrote tokenizers to {ASSETS}")


if __name__ == "__main__":
    main()
