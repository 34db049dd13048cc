"""The README's shell commands as the README tests read them (not a test module).

A command is one line of a ```bash/sh/shell block, continuation lines joined. Its comment is kept
apart from its argv: a comment holding ``cluster only`` marks a command that needs a cluster
(the README says so beside it), which the run test drives as a dry run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CLUSTER_ONLY = "cluster only"


@dataclass(frozen=True)
class Command:
    argv: list[str]
    comment: str  # the text after ``#`` on the command's line ("" if none)

    @property
    def line(self) -> str:
        return shlex.join(self.argv)

    @property
    def cluster_only(self) -> bool:
        return CLUSTER_ONLY in self.comment


def _split_comment(line: str) -> tuple[str, str]:
    """(code, comment) of one shell line: the first ``#`` outside quotes that starts a word."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1:].strip()
    return line, ""


def readme_commands(text: str | None = None) -> list[Command]:
    """Every command of the README's bash/sh/shell blocks, in order."""
    text = README.read_text() if text is None else text
    commands = []
    for block in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            code, comment = _split_comment(line)
            argv = shlex.split(code)
            if argv:
                commands.append(Command(argv, comment))
    return commands
