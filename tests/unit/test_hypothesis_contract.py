"""The bad-input contract under generated values (issue 53): Hypothesis feeds argument values that are each wrong
(negative, past a count's bound, NaN, text where a number belongs, a name twice, an empty name) to the Python API
and to the command line on tiny models, and checks the contract every time: the API raises ``SubnetlabError``; the
command prints one ``error:`` line and exits 2, with no traceback; neither writes anything under the output path.

Bounded for CI: ``EXAMPLES`` examples per API test and ``CLI_EXAMPLES`` for the command's (derandomized, no example database: the same examples on every
machine, nothing written to the working tree), no deadline (a shared CPU's slow moment is not a failure).
"""

from __future__ import annotations

import contextlib
import io
import math
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from subnetlab.errors import COUNT_BOUNDS, SubnetlabError  # noqa: E402

EXAMPLES = 30  # per API test (each refusal takes milliseconds)
CLI_EXAMPLES = 20  # the command line's test: some refusals come after the model loads (about a second each)
CONTRACT = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CLI_CONTRACT = settings(CONTRACT, max_examples=CLI_EXAMPLES)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """A tiny BERT classifier (NLI labels) and a tiny GPT-2 language model, saved with their tokenizers."""
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

    from subnetlab.tasks import NLI3
    from tests.unit.circuit_helpers import gpt2_style_tokenizer
    from tests.unit.lottery_helpers import word_tokenizer

    root = tmp_path_factory.mktemp("contract")
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, num_labels=3, id2label=dict(enumerate(NLI3)),
        label2id={k: i for i, k in enumerate(NLI3)})).save_pretrained(root / "bert")
    word_tokenizer().save_pretrained(root / "bert")
    tok = gpt2_style_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2,
                               n_head=2)).save_pretrained(root / "lm")
    tok.save_pretrained(root / "lm")
    return {"bert": str(root / "bert"), "lm": str(root / "lm")}


# -- generated wrong values ----------------------------------------------------------------------------------------
def _not_a_number() -> st.SearchStrategy:
    return st.one_of(st.none(), st.text(max_size=4), st.just(math.nan), st.booleans(), st.lists(st.none(), max_size=2))


bad_seeds = st.one_of(
    st.integers(max_value=-1),
    st.lists(st.integers(0, 5), min_size=2, max_size=4).filter(lambda s: len(set(s)) < len(s)),  # a seed twice
    st.integers(COUNT_BOUNDS["seeds"][0] + 1, 3 * COUNT_BOUNDS["seeds"][0]).map(range),  # past the bound
    st.floats(allow_nan=True), st.text(max_size=4), st.just([]), st.just(None))
bad_sparsity = st.one_of(
    st.floats(max_value=0.0), st.floats(min_value=1.0), st.just(math.nan), st.just(math.inf), st.text(max_size=4),
    st.just([]), st.just(None), st.lists(st.floats(0.01, 0.99), min_size=101, max_size=120))
bad_jobs = st.one_of(st.integers(max_value=0), st.integers(min_value=COUNT_BOUNDS["jobs"][0] + 1),
                     st.floats(allow_nan=True), st.text(max_size=3), st.booleans())
bad_controls = st.one_of(
    st.just(["random-weights", "random-weights"]), st.just([""]), st.just("random-weights"),
    st.lists(st.text(max_size=6).filter(lambda t: t not in ("random-weights", "shuffled-labels")), min_size=1,
             max_size=2))
bad_samples = st.one_of(st.integers(max_value=0), st.integers(min_value=COUNT_BOUNDS["samples"][0] + 1),
                        st.floats(allow_nan=True), st.text(max_size=3))


def _nothing_under(out: Path) -> None:
    assert not out.exists(), f"{out} was written: {sorted(p.name for p in out.rglob('*'))}"


@CONTRACT
@given(argument=st.sampled_from(["seeds", "sparsity", "jobs", "controls", "model", "task", "task_options"]),
       data=st.data())
def test_sl_prune_refuses_every_wrong_argument_at_the_call(models, argument, data) -> None:
    import subnetlab as sl

    value = data.draw({"seeds": bad_seeds, "sparsity": bad_sparsity, "jobs": bad_jobs, "controls": bad_controls,
                       "model": _not_a_number().filter(lambda v: not isinstance(v, str) or not v.strip()),
                       "task": _not_a_number().filter(lambda v: not isinstance(v, str) or not v.strip()),
                       "task_options": st.one_of(st.text(max_size=3), st.lists(st.integers(), max_size=2),
                                                 st.integers())}[argument], label=argument)
    kwargs = {"model": models["bert"], "task": "nli-synthetic", "seeds": 0, "preset": "demo", argument: value}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with pytest.raises(SubnetlabError):
            sl.prune(kwargs.pop("model"), kwargs.pop("task"), out, **kwargs)
        _nothing_under(out)


@CONTRACT
@given(argument=st.sampled_from(["seeds", "sparsity", "jobs", "controls", "ig_steps", "limit"]), data=st.data())
def test_sl_circuit_refuses_every_wrong_argument_at_the_call(models, argument, data) -> None:
    import subnetlab as sl

    bad_steps = st.one_of(st.integers(max_value=0), st.text(max_size=3), st.just(math.nan),
                          st.lists(st.integers(1, 200), min_size=65, max_size=70, unique=True),  # past the bound
                          st.lists(st.integers(1, 5), min_size=2, max_size=3).filter(lambda s: len(set(s)) < len(s)))
    value = data.draw({"seeds": bad_seeds, "sparsity": bad_sparsity.filter(lambda v: v is not None),
                       "jobs": bad_jobs, "controls": bad_controls, "ig_steps": bad_steps,
                       "limit": st.one_of(st.integers(max_value=0), st.text(max_size=3), st.just(math.nan))
                       }[argument], label=argument)
    kwargs = {"sparsity": 0.9, argument: value}
    if argument in ("ig_steps",):
        kwargs = {"method": "eap-ig", argument: value}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with pytest.raises(SubnetlabError):
            sl.circuit(models["lm"], "circuit:ioi", out, task_options={"n_train": 4, "n_eval": 2}, **kwargs)
        _nothing_under(out)


@CONTRACT
@given(samples=bad_samples, jobs=st.one_of(st.none(), bad_jobs))
def test_sl_discover_refuses_wrong_samples_and_jobs(models, samples, jobs) -> None:
    import subnetlab as sl

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        with pytest.raises(SubnetlabError):
            sl.discover(models["lm"], "arith:ab", out, samples=samples, jobs=jobs)
        _nothing_under(out)


# -- the command line ---------------------------------------------------------------------------------------------
def _text_of(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return strategy.map(lambda v: ",".join(map(str, v)) if isinstance(v, (list, range)) else str(v))


cli_seeds = st.one_of(
    st.integers(COUNT_BOUNDS["seeds"][0], 10 ** 12).map(lambda n: f"0-{n}"),  # past the bound, by a range
    st.tuples(st.integers(1, 9), st.integers(0, 8)).filter(lambda ab: ab[0] > ab[1]).map(lambda ab: f"{ab[0]}-{ab[1]}"),
    st.integers(0, 5).map(lambda n: f"{n},{n}"), st.text("abc,;x", min_size=1, max_size=4), st.just(""))
cli_sparsity = st.one_of(
    st.floats(min_value=1.0, allow_infinity=False).map(str), st.floats(max_value=0.0, allow_infinity=False).map(str),
    st.sampled_from(["nan", "inf", "half", "0.5,0.5", "0.5,", ""]),
    st.lists(st.integers(1, 999), min_size=101, max_size=110, unique=True).map(
        lambda v: ",".join(f"{x / 1000:g}" for x in v)))
cli_set = st.one_of(
    st.integers(COUNT_BOUNDS["total_steps"][0] + 1, 10 ** 15).map(lambda n: f"total_steps={n}"),
    st.integers(max_value=0).map(lambda n: f"total_steps={n}"),
    st.sampled_from(["total_steps=abc", "total_steps=nan", "batch_size=0", "batch_size=1.5", "nosuch=1"]))
cli_control = st.one_of(st.sampled_from(["", "random-weights,random-weights", "x", "random-weights,"]),
                        st.text("xyz-", min_size=1, max_size=5))


@CLI_CONTRACT
@given(option=st.sampled_from(["--seeds", "--sparsity", "--set", "--control", "--jobs"]), data=st.data())
def test_subnetlab_prune_answers_one_error_line_and_exit_2(models, option, data) -> None:
    from subnetlab.cli import main

    value = data.draw({"--seeds": cli_seeds, "--sparsity": cli_sparsity, "--set": cli_set, "--control": cli_control,
                       "--jobs": _text_of(bad_jobs.filter(lambda v: not isinstance(v, bool)))}[option], label=option)
    args = {"--seeds": "0", "--sparsity": "0.5", option: value}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        argv = ["prune", "--model", models["bert"], "--task", "nli-synthetic", "--preset", "demo", "--out", str(out)]
        for flag, text in args.items():
            argv += [flag, text] if not text.startswith("-") else [f"{flag}={text}"]
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                pytest.raises(SystemExit) as done:
            main(argv)
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert done.value.code == 2, (argv, err.getvalue())
        assert "Traceback" not in err.getvalue()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, lines)
        _nothing_under(out)
    shutil.rmtree(out, ignore_errors=True)
