"""`subnetlab reproduce lottery`: the BERT lottery-ticket study, its report and figures."""
