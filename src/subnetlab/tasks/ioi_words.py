"""A word-level tokenizer for the IOI prompts of ``tasks.circuits.ioi``, for small models trained here.

Every word and punctuation mark of the IOI templates, names, places and
objects is one token (``pre_tokenizers.Whitespace`` splits ``store,`` into
``store`` and ``,``), so every name is one token after a space and every IOI
pair fits; ``<pad>`` and ``<unk>`` come last.
"""

from __future__ import annotations

import re

from subnetlab.tasks.circuits import ioi

PAD, UNK = "<pad>", "<unk>"


def ioi_words() -> list[str]:
    """The vocabulary, sorted: names, places, objects and the templates' words and punctuation."""
    words = set(ioi.NAMES) | set(ioi.PLACES) | set(ioi.OBJECTS)
    for template in ioi.TEMPLATES:
        words |= set(re.findall(r"\w+|[^\w\s]", re.sub(r"\{\w+\}", " ", template)))
    return sorted(words)


def ioi_word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(ioi_words())}
    vocab.update({PAD: len(vocab), UNK: len(vocab) + 1})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, unk_token=UNK, name_or_path="subnetlab/ioi-words",
                                   model_input_names=["input_ids", "attention_mask"])


__all__ = ["ioi_word_tokenizer", "ioi_words"]
