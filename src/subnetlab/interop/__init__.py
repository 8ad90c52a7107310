"""A subnetlab subnetwork (heads/MLPs or edges) applied inside other interpretability tools.

* ``transformer_lens``: TransformerLens 4's ``TransformerBridge``, through its own hook points
  (``attn.hook_z`` / ``hook_mlp_out`` for nodes; writer hooks and the split Q/K/V, MLP-in and final residual
  reader hooks for edges), so the circuit runs inside the user's TransformerLens session;
* ``nnsight``: an ``nnsight.NNsight``-wrapped Hugging Face model: subnetlab's own hooks on the wrapped module,
  which fire inside every ``trace``, so a user reads or edits activations of the circuit, not of the full model.

Neither tool is a dependency: each module imports nothing of it and works on the object the user passes.
"""
