"""A report as blocks (`Doc`), rendered to Markdown and to a self-contained
HTML page, saved as report.md beside report.html (the suites save theirs
beside their report.json: suites/base.py)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aside_bench.report.tables import Table

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4em .8em}
code{background:#f4f4f4;padding:0 .2em}
"""


@dataclass
class Doc:
    """A report as blocks, rendered both to Markdown and to HTML."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str, note: bool = False) -> None:
        self.blocks.append(("note" if note else "p", text))

    def ul(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def results(self, tables: list[Table], ran: bool) -> None:
        """The "Results" section, or a note that no step ran to its end."""
        if not ran:
            self.p("No step ran to its end, so there is nothing to tabulate.", note=True)
        self.h(2, "Results")
        for table in tables:
            self.table(table)

    def image(self, path: Path, alt: str) -> None:
        self.blocks.append(("img", (path, alt)))

    def markdown(self) -> str:
        out: list[str] = []
        for kind, value in self.blocks:
            if kind == "h":
                out.append("#" * value[0] + " " + value[1] + "\n")
            elif kind in ("p", "note"):
                out.append(("> " if kind == "note" else "") + value + "\n")
            elif kind == "ul":
                out.append("\n".join(f"- {item}" for item in value) + "\n")
            elif kind == "table":
                out.append(value.markdown())
            elif kind == "img":
                out.append(f"![{value[1]}]({value[0].name})\n")
        return "\n".join(out)

    def html(self, title: str) -> str:
        out = [
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>"
        ]
        for kind, value in self.blocks:
            if kind == "h":
                out.append(f"<h{value[0]}>{html.escape(value[1])}</h{value[0]}>")
            elif kind == "p":
                out.append(f"<p>{html.escape(value)}</p>")
            elif kind == "note":
                out.append(f"<p class='note'>{html.escape(value)}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in value) + "</ul>")
            elif kind == "table":
                out.append(value.html())
            elif kind == "img":
                data = base64.b64encode(value[0].read_bytes()).decode()
                out.append(
                    f"<img alt='{html.escape(value[1])}' src='data:image/png;base64,{data}'>"
                )
        out.append("</body></html>")
        return "\n".join(out)


def write_pages(doc: Doc, md_path: Path, html_path: Path, title: str) -> None:
    """The report as Markdown at `md_path` and as HTML, images inlined, at `html_path`."""
    md_path.write_text(doc.markdown())
    html_path.write_text(doc.html(title))
