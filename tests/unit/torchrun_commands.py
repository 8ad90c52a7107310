"""Run several ``subnetlab`` commands one after another in each process ``torchrun`` starts (the tests of
``subnetlab.distributed``): ``torchrun --nproc-per-node 2 tests/unit/torchrun_commands.py ARGS... :: ARGS...``.

The processes join one process group first and keep it for every command (``subnetlab.cli.main`` leaves only a
group it joined itself); they start once, as importing torch and transformers once per command would double a
test's time. Exits with the first non-zero status."""

from __future__ import annotations

import sys


def commands(argv: list[str]) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == "::":
            groups.append([])
        else:
            groups[-1].append(arg)
    return [g for g in groups if g]


if __name__ == "__main__":
    from subnetlab.cli import main
    from subnetlab.distributed import close, init_from_env

    init_from_env()
    for command in commands(sys.argv[1:]):
        try:
            main(command)
        except SystemExit as e:
            if e.code:
                sys.exit(e.code)
    close()
