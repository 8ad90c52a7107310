"""`subnetlab reproduce subtask-induction`: Subtask Induction section 4 (arithmetic), report and figure."""
