"""Subcommands (``forq_jobs run``, ``forq_queues apply``, ``forq_keys create``) that take Django's
own options after them too: ``manage.py forq_jobs run failed --settings mysite.cron`` (a cron line
that appends options) was refused with "unrecognized arguments", since argparse gives a
subcommand's parser only its own arguments.

Each subcommand's parser gets Django's common options, hidden from its help, with no default (so a
value given before the subcommand is kept). ``--settings`` and ``--pythonpath`` were already read
by ``manage.py`` wherever they stand; the others reach ``handle()`` as usual.
"""

from __future__ import annotations

import argparse
from typing import Any

_COMMON: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("-v", "--verbosity"), {"type": int, "choices": [0, 1, 2, 3]}),
    (("--settings",), {}),
    (("--pythonpath",), {}),
    (("--traceback",), {"action": "store_true"}),
    (("--no-color",), {"action": "store_true"}),
    (("--force-color",), {"action": "store_true"}),
    (("--skip-checks",), {"action": "store_true"}),
)


def add_subcommands(parser: argparse.ArgumentParser, **kwargs: Any) -> Any:
    """``parser.add_subparsers(**kwargs)``, whose ``add_parser`` adds Django's common options."""
    sub = parser.add_subparsers(**kwargs)
    known = {option for action in parser._actions for option in action.option_strings}
    add_parser = sub.add_parser

    def add_with_common(name: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
        subparser = add_parser(name, **parser_kwargs)
        for flags, options in _COMMON:
            if set(flags) & known:  # only the options the command has (--skip-checks: some)
                subparser.add_argument(*flags, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **options)
        return subparser

    sub.add_parser = add_with_common  # type: ignore[method-assign]
    return sub
