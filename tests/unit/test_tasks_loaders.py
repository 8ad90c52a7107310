"""File loaders on the real files in ../shared/data and on malformed copies."""

from __future__ import annotations

from collections import Counter

import pytest

from subnetlab.errors import SubnetlabError
from subnetlab.tasks import NLI2, NLI3, PARAPHRASE, get_task, load_hans, load_mnli, load_paraphrase
from tests.conftest import SHARED_DATA

HANS = SHARED_DATA / "hans" / "hans_subset_val.tsv"
MNLI = SHARED_DATA / "mnli" / "dev_matched_1k.tsv"
PAWS = SHARED_DATA / "paws_qqp" / "dev_and_test.tsv"
needs_data = pytest.mark.skipif(not HANS.exists(), reason="../shared/data is absent")


@needs_data
def test_hans_real_file_per_subcase():
    rows = load_hans(HANS)  # unperturbed rows only by default
    assert len(rows) == 7500
    by_subcase = Counter(r.subcase for r in rows)
    assert len(by_subcase) == 30 and set(by_subcase.values()) == {250}
    assert Counter(r.heuristic for r in rows) == {"lexical_overlap": 2500, "subsequence": 2500, "constituent": 2500}
    first = rows[0]
    assert (first.text_a, first.text_b) == ("The banker believed the senator .", "The senator believed the banker .")
    assert NLI2[first.label] == "non-entailment" and first.subcase == "ln_subject/object_swap"
    for r in rows:  # labels follow the subcase prefix: *e_ entailment, *n_ non-entailment
        assert NLI2[r.label] == ("entailment" if r.subcase[1] == "e" else "non-entailment")
    assert len(load_hans(HANS, perturbed="only")) == 7500
    assert len(load_hans(HANS, perturbed="all")) == 15000


@needs_data
def test_mnli_plain_tsv_and_glue_and_jsonl(tmp_path):
    rows = load_mnli(MNLI)
    assert len(rows) == 1000
    assert set(Counter(NLI3[r.label] for r in rows)) == set(NLI3)
    first_line = MNLI.read_text().splitlines()[0].split("\t")
    assert (NLI3[rows[0].label], rows[0].text_a, rows[0].text_b) == tuple(first_line)
    glue = tmp_path / "dev.tsv"
    glue.write_text("index\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"
                    "0\tfic\tA man sleeps .\tA person sleeps .\tentailment\tentailment\n"
                    "1\tfic\tA man sleeps .\tNobody sleeps .\tcontradiction\t-\n"
                    "2\tfic\tA \"quoted\" man .\tA man .\tneutral\tNeutral\n")
    g = load_mnli(glue)
    assert [(r.text_a, NLI3[r.label]) for r in g] == [("A man sleeps .", "entailment"), ('A "quoted" man .', "neutral")]
    jl = tmp_path / "dev.jsonl"
    jl.write_text('{"premise": "P .", "hypothesis": "H .", "label": 2}\n{"sentence1": "P2", "sentence2": "H2", "gold_label": "neutral"}\n')
    assert [(r.text_a, r.label) for r in load_mnli(jl)] == [("P .", 2), ("P2", 1)]


@needs_data
def test_paws_strips_bytes_wrapping_and_filters_label0():
    rows = load_paraphrase(PAWS)
    assert len(rows) == 677 and Counter(r.label for r in rows) == {0: 486, 1: 191}
    assert rows[0].text_a.startswith("What were the major effects") and not rows[0].text_a.startswith("b'")
    assert rows[1].text_a.startswith("The guy I 'm dating")  # b"..." with a ' inside
    assert all(not r.text_a.startswith(("b'", 'b"')) and not r.text_b.startswith(("b'", 'b"')) for r in rows)
    only0 = load_paraphrase(PAWS, not_equivalent_only=True)
    assert len(only0) == 486 and {r.label for r in only0} == {0}
    assert PARAPHRASE[0] == "not_duplicate"


def test_qqp_glue_tsv(tmp_path):
    f = tmp_path / "dev.tsv"
    f.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\tHow old ?\tWhat age ?\t1\n2\t3\t4\tWhy ?\tWhere ?\t0\n")
    task = get_task("qqp", train=f, eval=f)
    assert [(e.text_a, e.label) for e in task.train] == [("How old ?", 1), ("Why ?", 0)]
    assert list(task.eval_splits) == ["id"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("entailment\tonly two fields\n", "bad.tsv:1: expected 3 tab-separated fields"),
        ("entailment\tP .\tH .\nmaybe\tP .\tH .\n", "bad.tsv:2: unknown label 'maybe' (allowed: entailment, neutral, contradiction)"),
        ("entailment\t \tH .\n", "bad.tsv:1: field 'premise' is missing or empty"),
    ],
)
def test_mnli_bad_rows_name_file_and_line(tmp_path, content, message):
    f = tmp_path / "bad.tsv"
    f.write_text(content)
    with pytest.raises(SubnetlabError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_mnli(f)


def test_hans_bad_input(tmp_path):
    header = "gold_label\tsentence1\tsentence2\tpairID\theuristic\tsubcase\ttemplate\n"
    f = tmp_path / "h.tsv"
    f.write_text(header + "contradiction\tA .\tB .\tex1\tlexical_overlap\tln_passive\tt1\n")
    with pytest.raises(SubnetlabError, match=r"h.tsv:2: unknown label 'contradiction' \(allowed: entailment, non-entailment\)"):
        load_hans(f)
    f.write_text(header + "entailment\tA .\tB .\n")
    with pytest.raises(SubnetlabError, match="h.tsv:2: expected 7 tab-separated fields, got 3"):
        load_hans(f)
    f.write_text("gold_label\tsentence1\n")
    with pytest.raises(SubnetlabError, match="h.tsv:1: header lacks column"):
        load_hans(f)
    f.write_text(header)
    with pytest.raises(SubnetlabError, match="no HANS rows"):
        load_hans(f)
    f.write_text(header + "entailment\tA .\tB .\tex1\tlexical_overlap\tle_passive\tt1\n")
    with pytest.raises(SubnetlabError, match="no 'perturbed' column"):
        load_hans(f, perturbed="only")


def test_missing_empty_and_malformed_files(tmp_path):
    with pytest.raises(SubnetlabError, match="nope.tsv: no such file"):
        load_mnli(tmp_path / "nope.tsv")
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(SubnetlabError, match="empty.tsv: empty file"):
        load_paraphrase(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"premise": "a", "hypothesis": "b", "label": 0}\n{not json\n')
    with pytest.raises(SubnetlabError, match="bad.jsonl:2: malformed JSON"):
        load_mnli(bad)
    paws = tmp_path / "paws.tsv"
    paws.write_text("id\tsentence1\tsentence2\tlabel\n1\tb'ok'\tb'unterminated\t0\n")
    with pytest.raises(SubnetlabError, match="paws.tsv:2: "):
        load_paraphrase(paws)
    paws.write_text("id\tsentence1\tsentence2\tlabel\n1\tb'ok'\tb'fine'\t7\n")
    with pytest.raises(SubnetlabError, match=r"paws.tsv:2: unknown label 7"):
        load_paraphrase(paws)


def test_hub_specs_parse_without_network():
    from subnetlab.tasks.hub import is_hub_spec, parse_hub_spec

    assert parse_hub_spec("hub:nyu-mll/glue:mnli@validation_matched") == ("nyu-mll/glue", "mnli", "validation_matched")
    assert parse_hub_spec("hub:jhu-cogsci/hans@validation") == ("jhu-cogsci/hans", None, "validation")
    assert is_hub_spec("hub:x@y") and not is_hub_spec("data/x.tsv")
    with pytest.raises(SubnetlabError, match="names no split"):
        parse_hub_spec("hub:nyu-mll/glue:mnli")


def test_nli_header_rows_are_recognised_not_read_as_data(tmp_path):
    """A header row naming premise / hypothesis / label (any order, any case) is skipped; rows are read by name."""
    f = tmp_path / "pairs.tsv"
    f.write_text("premise\thypothesis\tlabel\nA man sleeps .\tA person sleeps .\tentailment\n"
                 "A man sleeps .\tNobody sleeps .\tcontradiction\n")
    rows = load_mnli(f)
    assert [(r.text_a, r.text_b, NLI3[r.label]) for r in rows] == [
        ("A man sleeps .", "A person sleeps .", "entailment"), ("A man sleeps .", "Nobody sleeps .", "contradiction")]
    f.write_text("Label\tPremise\tHypothesis\nneutral\tP .\tH .\n")  # the plain layout with its header
    assert [(r.text_a, r.text_b, r.label) for r in load_mnli(f)] == [("P .", "H .", 1)]
    f.write_text("premise\thypothesis\tlabel\nP .\tH .\tmaybe\n")  # errors name the data row, not the header
    with pytest.raises(SubnetlabError, match=r"pairs.tsv:2: unknown label 'maybe'"):
        load_mnli(f)
    f.write_text("premise\thypothesis\tgenre\nP .\tH .\tfic\n")
    with pytest.raises(SubnetlabError, match=r"pairs.tsv:1: header names premise and hypothesis but no label column"):
        load_mnli(f)
    f.write_text("entailment\tP .\tH .\n")  # no header: the first line is data
    assert [r.label for r in load_mnli(f)] == [0]
    hans = tmp_path / "hans.tsv"
    hans.write_text("label\tpremise\thypothesis\theuristic\tsubcase\n"
                    "non-entailment\tThe doctor saw the lawyer .\tThe lawyer saw the doctor .\tlexical_overlap\tln_subject/object_swap\n")
    (row,) = load_hans(hans)
    assert (row.text_a, NLI2[row.label], row.subcase) == ("The doctor saw the lawyer .", "non-entailment", "ln_subject/object_swap")
    assert get_task("mnli", eval=str(f)).eval_splits["id"][0].label == 0
