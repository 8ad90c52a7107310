"""`subnetlab reproduce shape-bias`: Subtask Induction section 5 (shape bias), its report and figures."""
