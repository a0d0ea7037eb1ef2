"""Render the Quarto project: ``quarto render`` when Quarto is on PATH, else a fallback.

The fallback executes the same ``reports/*.qmd`` pages in a real Jupyter kernel (nbclient)
and writes one self-contained HTML file per page with pandoc (pypandoc-binary's pandoc;
images embedded), numbering figures and tables from the ``#| fig-cap`` / ``#| tbl-cap`` cell
options as Quarto would. It says which renderer ran; it never imitates Quarto's own output.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

# the pages, relative to the project root, in navigation order (the same list as _quarto.yml's render)
PAGES = ["index.qmd", "reports/overview.qmd", "reports/discernment.qmd", "reports/cue_profiles.qmd",
         "reports/interventions.qmd", "reports/diagnostics.qmd", "reports/data_quality.qmd"]
_CELL = re.compile(r"^```\{python\}[^\n]*\n(.*?)^```\s*$", re.S | re.M)


@dataclass
class RenderResult:
    renderer: str
    outputs: list[Path]
    out_dir: Path


def parse_qmd(text: str) -> tuple[dict, list[tuple[str, str]]]:
    """(front matter, [(kind, source)]) with kind 'markdown' or 'code'."""
    meta: dict = {}
    if text.startswith("---"):
        end = text.index("\n---", 3)
        meta = yaml.safe_load(text[3:end]) or {}
        text = text[end + 4:]
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in _CELL.finditer(text):
        if text[pos:m.start()].strip():
            parts.append(("markdown", text[pos:m.start()].strip()))
        parts.append(("code", m.group(1).rstrip()))
        pos = m.end()
    if text[pos:].strip():
        parts.append(("markdown", text[pos:].strip()))
    return meta, parts


def cell_options(source: str) -> dict:
    opts = {}
    for line in source.splitlines():
        if line.startswith("#|"):
            k, _, v = line[2:].partition(":")
            opts[k.strip()] = v.strip().strip('"')
    return opts


def qmd_to_notebook(path: Path) -> tuple[dict, nbformat.NotebookNode]:
    meta, parts = parse_qmd(path.read_text(encoding="utf-8"))
    nb = nbformat.v4.new_notebook()
    for kind, src in parts:
        nb.cells.append(nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return meta, nb


@contextlib.contextmanager
def page_kernel(cwd: Path, env: dict[str, str] | None = None):
    """One Jupyter kernel (local sockets) with ``env`` set, started in ``cwd``, stopped on exit.
    Pages executed in it share imported modules, not variables (`execute_page` resets them)."""
    from jupyter_client.manager import KernelManager
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    # local sockets, not unencrypted TCP; an absolute socket path, since the kernel runs in ``cwd``
    # and a relative one would point kernel and client at different places
    sockets = tempfile.TemporaryDirectory(prefix="discern-kernel-")
    km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets.name, "ipc"))
    try:
        km.start_kernel(cwd=str(cwd))
        yield km
    finally:
        if km.has_kernel:  # nbclient leaves a kernel manager it was given running: stop the kernel here
            km.shutdown_kernel(now=True)
        sockets.cleanup()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_RESET = "%reset -f\nimport matplotlib.pyplot as _plt\n_plt.close('all')\ndel _plt"


def execute_page(path: Path, cwd: Path, env: dict[str, str] | None = None, timeout: int = 900,
                 km=None) -> tuple[dict, nbformat.NotebookNode]:
    """Execute every code cell of a .qmd page in a Jupyter kernel; raise on the first error.
    With ``km`` (from `page_kernel`) the page runs in that kernel after a reset of its variables;
    without, in a fresh kernel of its own."""
    from nbclient import NotebookClient
    if km is None:
        with page_kernel(cwd, env) as own:
            return execute_page(path, cwd, None, timeout, own)
    meta, nb = qmd_to_notebook(path)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_RESET))
    NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    nb.cells.pop(0)
    return meta, nb


def _outputs_html(cell: nbformat.NotebookNode) -> str:
    out = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        if "image/png" in data:
            out.append(f'<img src="data:image/png;base64,{data["image/png"]}" style="max-width:100%"/>')
        elif "text/html" in data:
            out.append(data["text/html"])
        elif "text/plain" in data:
            out.append(f"<pre>{html.escape(data['text/plain'])}</pre>")
        elif o.get("output_type") == "stream" and o.get("name") == "stdout":
            out.append(f"<pre>{html.escape(o.get('text', ''))}</pre>")
    return "\n".join(out)


def notebook_to_markdown(meta: dict, nb: nbformat.NotebookNode) -> str:
    """Markdown with raw HTML outputs; figure/table captions numbered in page order."""
    md = []
    n_fig = n_tbl = 0
    labels: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            md.append(cell.source)
            continue
        opts = cell_options(cell.source)
        body = _outputs_html(cell)
        cap = ""
        if not body:  # a figure or table with nothing to show (its design has no trials): no caption, no number
            continue
        if "fig-cap" in opts:
            n_fig += 1
            cap = f"<p class='caption'><b>Figure {n_fig}.</b> {html.escape(opts['fig-cap'])}</p>"
            if "label" in opts:
                labels[opts["label"]] = f"Figure {n_fig}"
        elif "tbl-cap" in opts:
            n_tbl += 1
            cap = f"<p class='caption'><b>Table {n_tbl}.</b> {html.escape(opts['tbl-cap'])}</p>"
            if "label" in opts:
                labels[opts["label"]] = f"Table {n_tbl}"
        if body:
            anchor = f" id='{opts['label']}'" if "label" in opts else ""
            md.append(f"<div class='output'{anchor}>\n{cap if 'tbl-cap' in opts else ''}\n{body}\n"
                      f"{cap if 'fig-cap' in opts else ''}\n</div>")
    text = "\n\n".join(md)
    # Quarto cross-references: @fig-x / @tbl-x
    return re.sub(r"@((?:fig|tbl)-[\w-]+)", lambda m: f"[{labels.get(m.group(1), m.group(1))}](#{m.group(1)})", text)


CSS = """body{max-width:1100px;margin:2em auto;font-family:system-ui,sans-serif;line-height:1.45;padding:0 1em}
.caption{color:#333;font-size:.92em}.output{margin:1.2em 0;overflow-x:auto}pre{background:#f6f6f6;padding:.6em}
nav a{margin-right:1em}.renderer{color:#777;font-size:.85em;border-top:1px solid #ddd;margin-top:3em}"""


def project_pages(project: Path) -> list[str]:
    """The pages in _quarto.yml's ``project.render`` list (Quarto's own order), else `PAGES`."""
    try:
        pages = yaml.safe_load((project / "_quarto.yml").read_text())["project"]["render"]
        return [str(p) for p in pages] or PAGES
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return PAGES


def _nav_labels(project: Path, pages: list[str]) -> dict[str, str]:
    """Navigation labels from _quarto.yml's navbar (one place), else the page's file name."""
    labels = {"index.qmd": "Home"}
    try:
        conf = yaml.safe_load((project / "_quarto.yml").read_text())
        for item in conf["website"]["navbar"]["left"]:
            labels[item["href"]] = item["text"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        pass
    return {p: labels.get(p, Path(p).stem.replace("_", " ")) for p in pages}


def _render_page(project: Path, out_dir: Path, page: str, nav_pages: list[str], labels: dict[str, str], css: Path,
                 km) -> Path:  # noqa: ANN001
    """Execute one page in the kernel ``km`` and write its self-contained HTML."""
    import pypandoc
    from nbclient.exceptions import CellExecutionError

    from ..core.errors import DiscernError
    target = out_dir / Path(page).with_suffix(".html")
    target.parent.mkdir(parents=True, exist_ok=True)
    nav = " ".join(f"<a href='{os.path.relpath(out_dir / Path(q).with_suffix('.html'), target.parent)}'>"
                   f"{html.escape(labels[q])}</a>" for q in nav_pages)
    try:
        meta, nb = execute_page(project / page, project, km=km)
    except CellExecutionError as exc:  # a failing cell: one line naming the page and the error
        raise DiscernError(f"report page {page}: a cell failed: {exc.ename}: {exc.evalue}") from None
    md = f"<nav>{nav}</nav>\n\n" + notebook_to_markdown(meta, nb) + \
        "\n\n<p class='renderer'>Rendered by the discern_stats fallback renderer (Jupyter kernel + pandoc); " \
        "Quarto was not on PATH.</p>"
    pypandoc.convert_text(md, "html", format="markdown+raw_html", outputfile=str(target),
                          extra_args=["--standalone", "--embed-resources", f"--css={css}",
                                      f"--metadata=title:{meta.get('title', Path(page).stem)}"])
    return target


def fallback_render(project: Path, out_dir: Path, env: dict[str, str] | None = None,
                    pages: list[str] | None = None, progress=None) -> list[Path]:
    """Execute and write every page, mirroring Quarto's layout (``index.html``, ``reports/*.html``).
    All pages run in one kernel (imports are paid once; variables are reset between pages).
    ``progress(message)`` is called before and after each page (the CLI prints it)."""
    import time
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = pages or project_pages(project)
    labels = _nav_labels(project, pages)
    css = out_dir / "report.css"
    css.write_text(CSS)
    outs = []
    t_all = time.perf_counter()
    import uuid
    render_env = {**(env or {}), "DISCERN_RENDER_ID": uuid.uuid4().hex}  # the pages share one context
    with page_kernel(project, render_env) as km:
        for k, p in enumerate(pages, start=1):
            t0 = time.perf_counter()
            if progress:
                progress(f"[{k}/{len(pages)}] {p} ...")
            outs.append(_render_page(project, out_dir, p, pages, labels, css, km))
            if progress:
                progress(f"[{k}/{len(pages)}] {p}: {time.perf_counter() - t0:.1f} s")
    if progress:
        progress(f"rendered {len(pages)} pages in {time.perf_counter() - t_all:.1f} s")
    return outs


def render(project: str | Path = ".", *, out_dir: str | Path | None = None, env: dict[str, str] | None = None,
           force_fallback: bool = False, progress=None) -> RenderResult:
    """Render the reports: Quarto if available (the documented path), else the fallback."""
    project = Path(project).resolve()
    quarto = shutil.which("quarto")
    if quarto and not force_fallback:
        out = Path(out_dir) if out_dir else project / "_site"
        subprocess.run([quarto, "render", str(project), "--output-dir", str(out)], check=True,
                       env={**os.environ, **(env or {})})
        return RenderResult("quarto", sorted(out.glob("**/*.html")), out)
    out = Path(out_dir) if out_dir else project / "_site"
    return RenderResult("fallback (nbclient + pandoc)", fallback_render(project, out, env, progress=progress), out)


def embedded_images(html_text: str) -> int:
    return html_text.count("data:image/png;base64,")


__all__ = ["render", "fallback_render", "execute_page", "parse_qmd", "PAGES", "RenderResult", "embedded_images"]
