"""Issue 26's exported-model figure: what plain transformers does with an exported directory.

    PYTHONPATH=src .venv/bin/python scripts/export_plain_loading.py OUT_DIR

For every family (tiny models built from configs, seed 0) and every kind of removal (heads only, one MLP
only, both; zero ablation), ``subnetlab export`` writes a directory, and the script loads it with the
family's Auto class and with its own class (``GPT2LMHeadModel`` ...). Prints, per load, either the largest
logit difference to ``subnetlab.load_model(DIR)`` (a load that should never happen: it is not the exported
model) or the first line of the refusal.
"""
import sys
from pathlib import Path

import torch
import transformers

import subnetlab as sl

transformers.logging.set_verbosity_error()
root = Path(sys.argv[1])
common = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=64)
FAMILIES = {
    "bert": (transformers.BertForSequenceClassification, transformers.AutoModelForSequenceClassification,
             transformers.BertConfig(vocab_size=97, num_labels=3, **common), "classification"),
    "roberta": (transformers.RobertaForSequenceClassification, transformers.AutoModelForSequenceClassification,
                transformers.RobertaConfig(vocab_size=97, max_position_embeddings=70, pad_token_id=1, num_labels=3,
                                           **common), "classification"),
    "gpt2": (transformers.GPT2LMHeadModel, transformers.AutoModelForCausalLM,
             transformers.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_inner=64), "causal-lm"),
    "llama": (transformers.LlamaForCausalLM, transformers.AutoModelForCausalLM,
              transformers.LlamaConfig(vocab_size=97, num_key_value_heads=2, **common), "causal-lm"),
    "vit": (transformers.ViTForImageClassification, transformers.AutoModelForImageClassification,
            transformers.ViTConfig(image_size=16, patch_size=8, num_labels=3, **common), "image-classification"),
}
for family, (cls, auto, config, head) in FAMILIES.items():
    torch.manual_seed(0)
    cls(config).save_pretrained(root / family)
    m = sl.load_model(str(root / family), head=head)
    x = ({"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))} if family == "vit"
         else {"input_ids": torch.arange(3, 15).view(2, 6)})
    for removed in ("heads", "mlps", "both"):
        heads, mlps = torch.ones(2, 4), torch.ones(2)
        if removed != "mlps":
            heads[0, [0, 2]] = 0
        if removed != "heads":
            mlps[1] = 0
        out = root / f"{family}-{removed}"
        sl.Subnetwork.structured(m.adapter, heads, mlps, ablation="zero").save(root / f"{family}-{removed}.safetensors")
        from subnetlab.export import export_subnetwork

        export_subnetwork(m, sl.Subnetwork.load(root / f"{family}-{removed}.safetensors", m.adapter), out)
        with torch.no_grad():
            ours = sl.load_model(str(out), head=head).model(**x).logits
            for loader in (auto, cls):
                try:
                    plain = loader.from_pretrained(str(out))(**x).logits
                    what = f"LOADED, max |logits - subnetlab.load_model| = {(plain - ours).abs().max():.3g}"
                except Exception as e:  # what a user would see
                    what = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
                print(f"{family:8s} {removed:6s} {loader.__name__:38s} {what}")
