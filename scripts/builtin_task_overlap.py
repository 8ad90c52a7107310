"""Do the generated builtin tasks put training rows into evaluation? Overlaps by content (prompt, pair, label).

    PYTHONPATH=src .venv/bin/python scripts/builtin_task_overlap.py

nli-synthetic (defaults and the heuristic-core demo's options), hans-synthetic, and the Subtask Induction
demo's arithmetic tasks (base model on a+ab, discovery on ab, transfer on a^2+ab with seeds 0-2): how many
evaluation / test rows are training rows of the same task or of an earlier step's task.
"""
from subnetlab.tasks.registry import get_task


def key(task, split):
    names = task.split_labels(split)
    return [(e.text_a, e.text_b, names[e.label]) for e in task.examples(split)]

for opts in ({}, {"n_train": 4800, "n_eval": 300, "hans_per_subcase": 10, "minority_fraction": 0.1, "seed": 0}):
    t = get_task("nli-synthetic", **opts)
    train = set(key(t, "train"))
    for split in t.eval_splits:
        rows = key(t, split)
        print(f"nli-synthetic {opts or 'defaults'}: split {split}: {sum(r in train for r in rows)} of {len(rows)} rows "
              f"are training rows ({len(set(rows))} distinct; train {len(t.train)} rows, {len(train)} distinct)")
t = get_task("hans-synthetic")
train = set((a, b) for a, b, _ in key(t, "train"))
rows = key(t, "hans-synthetic")
print(f"hans-synthetic defaults: {sum((a, b) in train for a, b, _ in rows)} of {len(rows)} eval pairs are training pairs")

demo = dict(max_number=100, modulus=7, n_eval=500, n_test=500)
base = get_task("arith:a+ab", n_train=5000, seed=0, **demo)
sub = get_task("arith:ab", n_train=5000, seed=0, **demo)
bp = {a for a, _, _ in key(base, "train")}
brow = set(key(base, "train"))
for split in ("eval", "test"):
    rows = key(sub, split)
    print(f"SI demo discovery arith:ab {split}: {sum(a in bp for a, _, _ in rows)} of {len(rows)} prompts were base-model "
          f"(arith:a+ab) training prompts; {sum(r in brow for r in rows)} (prompt, answer) rows")
sp = {a for a, _, _ in key(sub, "train")}
for seed in (0, 1, 2):
    tr = get_task("arith:a^2+ab", ambiguous=True, n_disambiguation=300, seed=seed, **demo)
    own = {a for a, _, _ in key(tr, "train")}
    for split in ("eval", "test"):
        rows = key(tr, split)
        print(f"SI demo transfer arith:a^2+ab seed {seed} {split}: {sum(a in own for a, _, _ in rows)} own training prompts; "
              f"{sum(a in bp for a, _, _ in rows)} of {len(rows)} prompts were base training prompts, "
              f"{sum(r in brow for r in rows)} (prompt, answer) base training rows; {sum(a in sp for a, _, _ in rows)} "
              f"discovery training prompts")
