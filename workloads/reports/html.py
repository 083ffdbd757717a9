"""The HTML of comparison pages: a table, the self-contained page, an embedded figure, the
list of compared bundles, and the files a comparison writes."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

COMPARE_HTML = "compare.html"
COMPARE_JSON = "compare.json"


def html_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def html_page(title: str, body: str) -> str:
    """A self-contained comparison page around ``body``."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
table {{ border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }}
th, td {{ border: 1px solid #ddd; padding: 0.3em 0.6em; }} th {{ background: #f4f4f4; }}
img {{ max-width: 100%; }}</style></head><body>
<h1>{html.escape(title)}</h1>
{body}
</body></html>
"""


def html_figure(directory: Path, name: str, alt: str) -> str:
    """The PNG ``name`` of ``directory`` embedded, with a link to its file."""
    image = base64.b64encode((directory / name).read_bytes()).decode()
    return (f'<figure><img src="data:image/png;base64,{image}" alt="{html.escape(alt)}"\n'
            f'  data-file="{name}"><figcaption><a href="{name}">{name}</a>\n</figcaption>'
            "</figure>")


def html_sources(labelled: Sequence[tuple[str, Path]]) -> str:
    """The compared bundles, each linked to its report."""
    return "".join(
        f"<li>{html.escape(label)}: <a href=\"{html.escape(str(directory.resolve()))}"
        f"/report.html\">{html.escape(str(directory))}</a></li>"
        for label, directory in labelled
    )
