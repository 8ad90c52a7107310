"""The run-directory layer: one job function per command, typed job configs, resume and skip."""
