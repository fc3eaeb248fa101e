"""A single-file HTML report: the summary, the per-op table, the critical path, the
idle reasons and every figure (embedded as base64 PNG), with no external assets."""

from __future__ import annotations

import base64
import html
import io
import os

from reports.energy import power_figure
from reports.critical_path import critical_path_text, idle_text
from reports.data import ResultLike, report_data
from reports.figures import FIGURES
from reports.ops import op_table
from reports.summary import summary

SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("ops", "Ops by time"),
    ("critical-path", "Critical path"),
    ("idle", "Why engines sat idle"),
    ("figures", "Figures"),
)
"""(id, title) of each section, in order."""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
pre { background: #f6f8fa; padding: 1em; overflow-x: auto; font-size: 13px; }
nav a { margin-right: 1em; } figure { margin: 1em 0; } img { max-width: 100%; }
figcaption { color: #555; font-size: .9em; }
"""


def _png_base64(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def html_report(result: ResultLike) -> str:
    """The whole report as one HTML document (string)."""
    data = report_data(result)
    title = f"archsim report: {data.program_name} on {data.config_name}"
    texts = {
        "summary": summary(data),
        "ops": op_table(data, sort="time"),
        "critical-path": critical_path_text(data),
        "idle": idle_text(data),
    }
    body = [f"<h1>{html.escape(title)}</h1>",
            "<nav>" + "".join(f'<a href="#{sid}">{html.escape(name)}</a>'
                              for sid, name in SECTIONS) + "</nav>"]
    for sid, name in SECTIONS:
        body.append(f'<section id="{sid}"><h2>{html.escape(name)}</h2>')
        if sid in texts:
            body.append(f"<pre>{html.escape(texts[sid])}</pre>")
        else:
            figures = {name: make(data) for name, make in FIGURES.items()}
            if data.energy is not None:
                figures["power"] = power_figure(data.energy)
            for figure_name, figure in figures.items():
                body.append(f'<figure id="figure-{figure_name}"><img alt="{figure_name}" '
                            f'src="data:image/png;base64,{_png_base64(figure)}">'
                            f"<figcaption>{figure_name.replace('_', ' ')}</figcaption></figure>")
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_html(result: ResultLike, path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(html_report(result))


__all__ = ["SECTIONS", "html_report", "write_html"]
