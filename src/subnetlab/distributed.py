"""One computation across processes, on PyTorch's own ``torch.distributed`` (launched by ``torchrun``,
``accelerate launch`` or Slurm's ``srun`` through either).

A launcher starts one process per rank and sets ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; ``init_from_env()`` (called by the first ``world()``) joins them into one process group (gloo for CPU tensors, NCCL for CUDA
tensors when this torch has it; each rank on the GPU of its local rank). What the ranks share is small:

* ``World`` (``world()``): this process's ``rank`` of ``size``, ``is_writer`` (rank 0, the one that writes
  run directories and reports), ``share(n)`` (the items a rank takes of ``n``, contiguous and balanced),
  ``all_reduce_sum(tensor)`` (in place; a no-op in a single process), ``barrier()`` and ``all_same(values)``
  (whether every rank holds the same numbers: the runs a sweep skips, the step a run resumes from).
* A rank that stops (an error, a kill) leaves the others waiting in a collective: each waits at most the
  group's timeout (``SUBNETLAB_DIST_TIMEOUT_MINUTES``, default ``DEFAULT_TIMEOUT_MINUTES``), then ends with
  an error naming its rank. ``torchrun`` ends the others as soon as one fails.

Methods read ``world()`` themselves: an attribution pass scores each rank's batches and all-reduces the sums
(``methods.attribution.scores.attribute``), the mask trainer gives each rank a slice of every batch and
all-reduces the gradients (``methods.l0.trainer``), the executor's local backend runs every job of a sweep on
every rank in the same order, rank 0 alone writing (``executor.run``); in a single process all are unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from subnetlab.errors import SubnetlabError

if TYPE_CHECKING:  # torch is imported inside the functions: the CLI starts without it
    import torch

LAUNCH_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
TIMEOUT_VARIABLE = "SUBNETLAB_DIST_TIMEOUT_MINUTES"
DEFAULT_TIMEOUT_MINUTES = 30.0


def launched_size() -> int:
    """The world size a launcher set in the environment (``WORLD_SIZE``; 1 when none did)."""
    text = os.environ.get("WORLD_SIZE", "1").strip() or "1"
    if not text.isdigit() or int(text) < 1:
        raise SubnetlabError(f"WORLD_SIZE={text!r} in the environment: the number of processes, a whole number "
                             "from 1 (set by torchrun, accelerate launch or srun)", setting="world_size")
    return int(text)


def launched_rank() -> int:
    """This process's rank as the launcher set it (``RANK``; 0 in a single process), read without torch."""
    text = os.environ.get("RANK", "0").strip() or "0"
    return int(text) if text.isdigit() else 0


def launched() -> bool:
    """Whether this process is one of several a launcher started (``WORLD_SIZE`` above 1)."""
    return launched_size() > 1


def timeout_minutes() -> float:
    """Minutes a rank waits for the others in a collective (``SUBNETLAB_DIST_TIMEOUT_MINUTES``)."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT_MINUTES
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise SubnetlabError(f"{TIMEOUT_VARIABLE}={text!r} in the environment: the minutes a rank waits for the "
                             "others, a positive number", setting="timeout")
    return value


def init_from_env(timeout: float | None = None) -> "World":
    """Join the process group the launcher's environment describes (nothing to do in a single process or when
    joined already) and return ``world()``. ``timeout``: minutes a collective waits (default ``timeout_minutes()``).
    """
    import datetime

    import torch
    import torch.distributed as dist

    if not launched() or dist.is_initialized():
        return world()
    missing = [name for name in LAUNCH_VARIABLES if name != "LOCAL_RANK" and not os.environ.get(name)]
    if missing:
        raise SubnetlabError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} not set: start the "
                             "processes with torchrun, accelerate launch or srun", setting="world_size")
    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        backend = "cpu:gloo,cuda:nccl"  # each tensor's collective on its own device's backend
    minutes = timeout_minutes() if timeout is None else float(timeout)
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=minutes))
    except (RuntimeError, ValueError) as e:  # a rendezvous that never completes, a port taken
        raise SubnetlabError(f"rank {os.environ.get('RANK')}: could not join the {os.environ['WORLD_SIZE']} "
                             f"processes at {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
                             f"within {minutes:g} minutes ({str(e).splitlines()[0] if str(e) else type(e).__name__})",
                             setting="world_size") from None
    return world()


def close() -> None:
    """Leave the process group (at the end of a command); nothing to do when none was joined."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of one computation (``size`` 1: a single process)."""

    rank: int = 0
    size: int = 1

    @property
    def is_writer(self) -> bool:
        """Rank 0 writes run directories and reports; the other ranks compute."""
        return self.rank == 0

    def share(self, n: int) -> range:
        """The items ``[start, stop)`` of ``n`` this rank takes: contiguous, sizes differing by at most one."""
        base, extra = divmod(int(n), self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (1 if self.rank < extra else 0))

    def all_reduce_sum(self, tensor: "torch.Tensor") -> "torch.Tensor":
        """Sum ``tensor`` over the ranks, in place (every rank gets the sum); a single process: unchanged."""
        if self.size == 1:
            return tensor
        import torch.distributed as dist

        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        except RuntimeError as e:  # the group's timeout, or a rank gone: one line naming this rank
            raise self.lost(e) from None
        return tensor

    def barrier(self) -> None:
        """Wait until every rank is here (an all-reduce of one number, so it fails as ``all_reduce_sum`` does)."""
        if self.size > 1:
            import torch

            self.all_reduce_sum(torch.zeros(1, dtype=torch.int64))

    def all_same(self, values: "list[int]") -> bool:
        """Whether every rank holds the same whole numbers ``values`` (every rank gets the same answer; a single
        process: True). One all-reduce of the values and their squares: equal on every rank exactly when
        ``size * sum(v * v) == sum(v) ** 2`` for each value."""
        if self.size == 1:
            return True
        import torch

        v = torch.tensor([int(x) for x in values], dtype=torch.int64)
        sums = self.all_reduce_sum(torch.cat([v, v * v]))
        total, squares = sums[:len(v)], sums[len(v):]
        return bool(torch.equal(total * total, squares * self.size))

    def lost(self, error: BaseException) -> SubnetlabError:
        """The one-line error of a collective that failed on this rank: another rank stopped, or the timeout."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return SubnetlabError(f"rank {self.rank} of {self.size}: the other ranks did not answer (one stopped, or "
                              f"took longer than the timeout of {timeout_minutes():g} minutes, {TIMEOUT_VARIABLE}): "
                              f"{first}")


def world() -> World:
    """This process's ``World``: the process group's rank and size, else a single process.

    A process a launcher started (``launched()``) joins the group at the first call (``init_from_env``): every
    rank reaches it at the same point of the same command, after the command's checks of its input, so bad input
    ends every rank before any of them waits for the others. A single process that never imported
    ``torch.distributed`` (a sweep's driver, a job without torch) gets ``World()`` without importing torch."""
    import sys

    if "torch.distributed" not in sys.modules and not launched():  # no group joined without importing it
        return World()
    import torch.distributed as dist

    if not dist.is_available():
        return World()
    if not dist.is_initialized() and launched():
        init_from_env()
    if dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


@contextmanager
def leaving() -> Iterator[None]:
    """Leave the process group the block joined (``world()`` joins it when first asked), whatever the block did;
    a group joined before the block stays (a caller running several commands in one process group)."""
    import sys

    def joined() -> bool:
        if "torch.distributed" not in sys.modules:  # nothing joined a group without importing it
            return False
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()

    before = joined()
    try:
        yield
    finally:
        if not before and joined():
            close()


__all__ = ["DEFAULT_TIMEOUT_MINUTES", "LAUNCH_VARIABLES", "TIMEOUT_VARIABLE", "World", "close", "init_from_env",
           "launched", "launched_rank", "launched_size", "leaving", "timeout_minutes", "world"]
