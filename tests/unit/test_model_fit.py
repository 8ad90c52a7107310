"""A model that cannot run a task is refused when it is loaded, naming both (not half-way through a run)."""

from __future__ import annotations

import pytest
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

from subnetlab.errors import SubnetlabError
from subnetlab.methods.model_fit import check_model_fits_task, family_kind, head_outputs, new_head_notice
from subnetlab.models import load_model
from subnetlab.tasks.registry import get_task


def _bert(vocab: int = 60) -> BertForSequenceClassification:
    return BertForSequenceClassification(BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32, num_labels=3))


def _gpt2(vocab: int) -> GPT2LMHeadModel:
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=16))


def test_a_folder_without_tokenizer_files_has_no_tokenizer(tmp_path):
    _bert().save_pretrained(tmp_path / "m")
    loaded = load_model(str(tmp_path / "m"), head="classification")
    assert loaded.tokenizer is None  # transformers 5 alone would give one with only special tokens
    task = get_task("nli-synthetic", n_train=20, n_eval=10, hans_per_subcase=1)
    with pytest.raises(SubnetlabError, match="has no tokenizer") as refused:
        check_model_fits_task(loaded.model, loaded.tokenizer, task, "m")
    assert refused.value.setting == "model"


def test_an_encoder_is_not_a_causal_lm():
    task = get_task("arith:ab", n_train=20, n_eval=5, n_test=5, max_number=20)
    assert family_kind(_bert()) == "encoder" and family_kind(_gpt2(30)) == "decoder"
    with pytest.raises(SubnetlabError, match="not a causal language model"):
        check_model_fits_task(_bert(), task.tokenizer, task, "bert")


def test_token_ids_beyond_the_embedding_are_refused_naming_both_sizes():
    task = get_task("arith:ab", n_train=20, n_eval=5, n_test=5, max_number=20)
    check_model_fits_task(_gpt2(len(task.tokenizer)), task.tokenizer, task, "gpt2")  # exactly enough rows
    with pytest.raises(SubnetlabError, match=rf"vocabulary of 10 tokens, but the tokenizer .* has {len(task.tokenizer)}"):
        check_model_fits_task(_gpt2(10), task.tokenizer, task, "gpt2")


def test_a_head_of_another_size_is_refused_naming_both_numbers():
    nli = get_task("nli-synthetic", n_train=20, n_eval=10, hans_per_subcase=1)  # 3 labels
    hans = get_task("hans-synthetic", n_per_subcase=1, eval_per_subcase=1)  # 2 labels
    tok = _Tokenizer(60)
    check_model_fits_task(_bert(), tok, nli, "bert")  # 3 outputs, 3 labels
    check_model_fits_task(_bert(), tok, hans, "bert")  # a 3-way NLI head is scored on 2-way HANS
    two = BertForSequenceClassification(BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=32, num_labels=2))
    with pytest.raises(SubnetlabError, match=r"model m has a classification head with 2 outputs, but task nli-synthetic "
                                             r"has 3 labels \(entailment, neutral, contradiction\); the head must match") as e:
        check_model_fits_task(two, tok, nli, "m")
    assert e.value.setting == "model"


def test_fine_tuning_says_which_head_it_adds():
    nli = get_task("nli-synthetic", n_train=20, n_eval=10, hans_per_subcase=1)
    base = BertConfig(architectures=["BertModel"], num_labels=2)
    assert head_outputs(base) is None and head_outputs(_bert()) == 3
    assert new_head_notice(base, nli, "m") == ("model m has no classification head (BertModel): a new head of 3 outputs "
                                               "is added for task nli-synthetic (3 labels (entailment, neutral, contradiction))")
    two = BertConfig(architectures=["BertForSequenceClassification"], num_labels=2)
    assert "with 2 outputs, but task nli-synthetic has 3 labels" in new_head_notice(two, nli, "m")
    assert "a new head of 3 outputs replaces it" in new_head_notice(two, nli, "m")
    three = BertConfig(architectures=["BertForSequenceClassification"], num_labels=3)
    assert new_head_notice(three, nli, "m") is None


class _Tokenizer:
    """Only its length matters to the vocabulary check."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_a_base_checkpoint_loaded_with_a_fresh_classifier_is_refused(tmp_path):
    from transformers import BertModel

    BertModel(BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path / "base")
    with pytest.raises(SubnetlabError, match=r"not in the checkpoint .*\(classifier\.bias, classifier\.weight\)"):
        load_model(str(tmp_path / "base"), head="classification", num_labels=2)  # a random head: refused at load
    loaded = load_model(str(tmp_path / "base"), head="classification", num_labels=2,
                        new_weights=("classifier.*",))  # a random head of 2 outputs, asked for
    hans = get_task("hans-synthetic", n_per_subcase=1, eval_per_subcase=1)  # 2 labels: the sizes agree
    with pytest.raises(SubnetlabError, match=r"model base has no trained classification head \(saved as BertModel\)"):
        check_model_fits_task(loaded.model, _Tokenizer(60), hans, "base")


def test_answers_of_several_tokens_are_refused_at_load(tmp_path):
    from transformers import AutoTokenizer

    from subnetlab.models import resolve

    (tmp_path / "qa.csv").write_text("text,answer\nthe sky is,blue\nthe grass is,green\nthe tomato is,reddishpurpleish\n"
                                     "the sea is,blue\n")
    task = get_task(f"file:{tmp_path / 'qa.csv'}", answer_column="answer", eval_fraction=0.25)
    tok = AutoTokenizer.from_pretrained(resolve("minilm"))
    assert len(tok.encode(" reddishpurpleish", add_special_tokens=False)) > 1  # the premise of the test
    with pytest.raises(SubnetlabError, match=r"model m: task file:qa\.csv: answer 'reddishpurpleish' is \d+ tokens"):
        check_model_fits_task(_gpt2(len(tok)), tok, task, "m")
