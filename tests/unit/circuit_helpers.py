"""Tiny GPT-2-style (byte-level BPE) and Llama-style (SentencePiece-like BPE) tokenizers, trained here.

Trained in milliseconds on a small corpus of IOI and greater-than sentences, with a vocabulary small
enough that some names and years are several tokens: the circuit tasks must pick the ones that are one.
"""

from __future__ import annotations

import functools

from subnetlab.tasks.circuits.greater_than import NOUNS
from subnetlab.tasks.circuits.ioi import NAMES, OBJECTS, PLACES, TEMPLATES

VOCAB = 600
COMMON = NAMES[:20]  # names the corpus repeats (one token each); the rest appear once or never


def _corpus() -> list[str]:
    lines = []
    for i, template in enumerate(TEMPLATES):
        for j, (a, b) in enumerate(zip(COMMON, COMMON[1:] + COMMON[:1])):
            lines.append(template.format(A=a, B=b, S=b, place=PLACES[(i + j) % len(PLACES)],
                                         object=OBJECTS[(i + 2 * j) % len(OBJECTS)]) + " " + a)
    for k, noun in enumerate(NOUNS):
        for yy in range(0, 100, 1):
            century = 11 + (k + yy) % 7
            lines.append(f"The {noun} lasted from the year {century}{yy:02d} to the year {century}{(yy + 1) % 100:02d}")
    return lines * 3


@functools.lru_cache(maxsize=None)
def gpt2_style_tokenizer():
    """Byte-level BPE like GPT-2's (a space joins the next word's token: ' Mary')."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([  # years in two-digit halves, as GPT-2 splits 1732 into 17 32
        pre_tokenizers.Split(Regex(r"\d\d"), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(_corpus(), trainer)
    return GPT2TokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                             name_or_path="tiny-gpt2-bpe")


@functools.lru_cache(maxsize=None)
def llama_style_tokenizer():
    """SentencePiece-like BPE (Metaspace: '▁Mary'), wrapped as Llama's fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(_corpus(), trainer)
    return LlamaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                              pad_token="<unk>", name_or_path="tiny-llama-bpe")
