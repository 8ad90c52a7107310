"""``python -m subnetlab`` (and ``torchrun -m subnetlab``): the ``subnetlab`` command."""

from subnetlab.cli import main

main()
