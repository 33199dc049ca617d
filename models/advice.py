"""How a refusal names the request option that would lift it, once for every front door.

Some refusals are lifted by an option of the same request: too few free hosts now by
`waitForCapacity` (`--wait-for-capacity`), a scale-down that would take running workspaces' GPUs by
`force` (`--force`). The rule's message is written once, where the rule is checked (the catalog
checks in `models.catalog`, the cluster workflow's validators in `models.rules`), and names the
option with `set_option`, in the HTTP API's words: `set waitForCapacity to true`. The API answers
that message as it is; `colonyctl` prints every refusal through `for_command_line`, which names the
flag instead (`add --wait-for-capacity`), in local mode and in remote mode alike (there the API's
message arrives with the API's words, and is rendered the same way).

Standard library only: `colonyctl`'s error printer imports it at start-up.
"""

from __future__ import annotations

OPTION_FLAGS: dict[str, str] = {
    "waitForCapacity": "--wait-for-capacity",
    "force": "--force",
}
"""The request options a refusal may tell the user to set (the API's field or query parameter),
and `colonyctl`'s flag for each."""


def set_option(option: str) -> str:
    """The words that tell the user to set the boolean option `option` (the API's spelling).

    Raises:
        ValueError: `option` is not one `colonyctl` has a flag for (a message must name one the
            command line can render).
    """
    if option not in OPTION_FLAGS:
        raise ValueError(f"no flag renders option '{option}'")
    return f"set {option} to true"


def for_command_line(message: str) -> str:
    """`message` as `colonyctl` prints it: each option the API would set, as the flag to add."""
    for option, flag in OPTION_FLAGS.items():
        message = message.replace(set_option(option), f"add {flag}")
    return message
