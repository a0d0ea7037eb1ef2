"""Screenshot every rendered report page with headless Chromium, and check that no table is wider
than the page body.

    python docs/screenshot_report.py demo_out/report /tmp/shots     # needs `chromium` on PATH
    python docs/screenshot_report.py demo_out/report /tmp/shots --width 1400 --pages reports/interventions.html

Each page is captured at ``--width`` px (default 1400) and its full height (the screenshot is
taken tall and the blank bottom cropped). For each page it prints the tables that overflow the
body (`table_overflow`: laid out by Chromium itself, at the same width); the exit status is 1
when any does.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# run in the page after layout: every <table> whose right edge passes its page body's content box,
# or whose output block scrolls sideways; the result replaces the body (read back by --dump-dom)
_OVERFLOW_JS = """<script>window.addEventListener('load', function () {
  var body = document.body, cs = getComputedStyle(body);
  var right = body.getBoundingClientRect().right - parseFloat(cs.paddingRight);
  var bad = [];
  document.querySelectorAll('table').forEach(function (t, i) {
    var r = t.getBoundingClientRect(), box = t.closest('.output') || t.parentElement;
    var cap = (box && box.id) || ('table ' + (i + 1));
    if (r.right > right + 1 || (box && box.scrollWidth > box.clientWidth + 1))
      bad.push({table: cap, width: Math.round(r.width), body: Math.round(right - body.getBoundingClientRect().left)});
  });
  document.body.innerHTML = '<pre id="overflow">' + JSON.stringify(bad) + '</pre>';
});</script>"""


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        sys.exit("no chromium on PATH (Debian: apt-get install chromium)")
    return exe


def table_overflow(page: Path, width: int = 1400, chromium: str | None = None) -> list[dict]:
    """The tables of an HTML page wider than its body at ``width`` px, as Chromium lays them out."""
    chromium = chromium or _chromium()
    html = page.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / page.name
        probe.write_text(re.sub(r"</body>", _OVERFLOW_JS + "</body>", html, count=1), encoding="utf-8")
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size={width},2000", "--virtual-time-budget=5000", "--dump-dom",
                            probe.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="overflow">(.*?)</pre>', r.stdout, re.S)
    if m is None:
        raise RuntimeError(f"chromium did not lay out {page}: {r.stderr[-500:]}")
    return json.loads(m.group(1).replace("&quot;", '"'))


def _crop_blank_bottom(png: Path) -> None:
    from PIL import Image, ImageChops
    im = Image.open(png).convert("RGB")
    bg = Image.new("RGB", im.size, (255, 255, 255))
    box = ImageChops.difference(im, bg).getbbox()
    if box:
        im.crop((0, 0, im.width, min(im.height, box[3] + 40))).save(png)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site")
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=16000, help="capture height before the blank bottom is cropped")
    ap.add_argument("--pages", nargs="*", help="pages relative to SITE (default: every .html)")
    a = ap.parse_args(argv)
    chromium = _chromium()
    site, out_dir = Path(a.site), Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = [site / p for p in a.pages] if a.pages else sorted(site.glob("**/*.html"))
    worst = 0
    for page in pages:
        png = out_dir / (page.relative_to(site).with_suffix("").as_posix().replace("/", "_") + ".png")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={a.width},{a.height}", f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=180)
        _crop_blank_bottom(png)
        bad = table_overflow(page, a.width, chromium)
        worst = max(worst, len(bad))
        print(png, "tables fit" if not bad else f"{len(bad)} table(s) wider than the body: {bad}")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
