"""The L0 library: hard-concrete masks, the Lagrangian, schedules, data order, checkpoints and the one mask trainer.

Every method that trains hard-concrete masks on a frozen model (heads and MLPs in ``methods.head_pruning``,
edges in ``methods.edge_pruning``) is built from these parts.
"""
