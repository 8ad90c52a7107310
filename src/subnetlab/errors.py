"""The one exception type users see: bad input, named precisely.

Every public function that validates input raises ``SubnetlabError`` with a
message that names the value or the ``file:line`` at fault. The CLI turns it
into a single ``error: ...`` line on stderr and exit status 2.
"""

from __future__ import annotations


class SubnetlabError(ValueError):
    """Bad input or an unsupported model: the message says which value is at fault.

    ``setting`` names the configuration setting at fault in the library's own
    terms (``"sparsity"``, ``"eval_data"``); the CLI maps it to the flag the user typed.
    """

    def __init__(self, message: str = "", *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


def require(condition: bool, message: str) -> None:
    """Raise ``SubnetlabError(message)`` unless ``condition`` holds."""
    if not condition:
        raise SubnetlabError(message)
