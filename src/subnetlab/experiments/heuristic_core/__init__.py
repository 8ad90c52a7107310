"""`subnetlab reproduce heuristic-core`: the Heuristic Core study, its steps, report and figures."""
