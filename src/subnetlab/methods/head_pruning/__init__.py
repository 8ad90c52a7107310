"""Hard-concrete structured pruning of heads and MLPs (Heuristic Core, Bhaskar et al. 2024, Appendix B)."""
