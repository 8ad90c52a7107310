"""``subnetlab view``: one self-contained HTML page (d3 + dagre inlined) for edge circuits, scores files and
head/MLP subnetworks; ``runs`` reads what is shown, ``page`` writes the page, ``tracer`` exports circuit-tracer's
graph JSON."""
