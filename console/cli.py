"""The `steer` entry point: UI commands live here, everything else is agent.cli's."""
from __future__ import annotations

import sys

from agent import cli as agent_cli


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = agent_cli.build_parser()
    return agent_cli.run_command(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
