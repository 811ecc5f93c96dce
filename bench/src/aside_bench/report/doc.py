"""A report as blocks (`Doc`), rendered to Markdown and to a self-contained HTML page."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

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
    """A report as blocks, each kept as its Markdown and its HTML (an image's read when shown)."""

    blocks: list[tuple[str, str | tuple[Path, str]]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        shown = f"<h{level}>{escape(text)}</h{level}>"
        self.blocks.append(("#" * level + " " + text + "\n", shown))

    def p(self, text: str, note: bool = False) -> None:
        shown = f"<p class='note'>{escape(text)}</p>" if note else f"<p>{escape(text)}</p>"
        self.blocks.append((("> " if note else "") + text + "\n", shown))

    def ul(self, items: list[str]) -> None:
        shown = "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"
        self.blocks.append(("\n".join(f"- {item}" for item in items) + "\n", shown))

    def table(self, table: Table) -> None:
        self.blocks.append((table.markdown(), table.html()))

    def results(self, tables: list[Table], ran: bool) -> None:
        """The "Results" section, or a note that no step ran to its end."""
        if not ran:
            self.p("No step ran to its end, so there is nothing to tabulate.", note=True)
        self.h(2, "Results")
        for table in tables:
            self.table(table)

    def image(self, path: Path, alt: str) -> None:
        self.blocks.append((f"![{alt}]({path.name})\n", (path, alt)))

    def markdown(self) -> str:
        return "\n".join(markdown for markdown, _ in self.blocks)

    def html(self, title: str) -> str:
        head = (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body>"
        )
        shown = [page if isinstance(page, str) else _image(*page) for _, page in self.blocks]
        return "\n".join([head, *shown, "</body></html>"])


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{escape(alt)}' src='data:image/png;base64,{data}'>"


def write_pages(doc: Doc, md_path: Path, html_path: Path, title: str) -> None:
    """The report as Markdown at `md_path` and as HTML, images inlined, at `html_path`."""
    md_path.write_text(doc.markdown())
    html_path.write_text(doc.html(title))
