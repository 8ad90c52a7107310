"""The run-directory contract under the name runs-layer code has long imported it by.

Its home is ``subnetlab.run_directory``, below the executor and the runs layer alike (both use it);
this module only re-exports it, so ``from subnetlab.runs.directory import claim`` keeps working.
"""

from subnetlab.run_directory import (CONFIG_FILE, LOCK_FILE, METRICS_FILE, absolute_input, absolute_inputs,  # noqa: F401
                                     check_config, check_writable, claim, differing_keys, finished_metrics, is_finished,
                                     lock, plain, record_runtime, remove_temporaries, resolve_run_path, run_entries,
                                     run_relative, same_config)

__all__ = ["CONFIG_FILE", "LOCK_FILE", "METRICS_FILE", "absolute_input", "absolute_inputs", "check_config", "check_writable",
           "claim", "differing_keys", "finished_metrics", "is_finished", "lock", "plain", "record_runtime",
           "remove_temporaries", "resolve_run_path", "run_entries", "run_relative", "same_config"]
