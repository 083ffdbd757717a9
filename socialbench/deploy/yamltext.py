"""YAML text for generated files: keys in the order given, short lists inline, no anchors."""

from __future__ import annotations

from typing import Any

import yaml


class Inline(list[Any]):
    """A list written on one line (``[a, b, c]``), e.g. a command."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _inline(dumper: yaml.SafeDumper, data: Inline) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_Dumper.add_representer(Inline, _inline)


def dump(data: Any, header: str) -> str:
    """``data`` as YAML after ``header`` (each of its lines becomes a ``#`` comment)."""
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1000, allow_unicode=True)
    return comment + body
