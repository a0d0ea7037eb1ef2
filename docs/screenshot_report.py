"""Screenshot every rendered report page with headless Chromium (for looking at them as images).

    python docs/screenshot_report.py demo_out/report /tmp/shots     # needs `chromium` on PATH

Each page is captured at 1280 px width and its full height (measured from the HTML's length, capped).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def main(site: str, out: str, height: int = 9000) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        sys.exit("no chromium on PATH (Debian: apt-get install chromium)")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for page in sorted(Path(site).glob("**/*.html")):
        png = out_dir / (page.relative_to(site).with_suffix("").as_posix().replace("/", "_") + ".png")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size=1280,{height}", f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        print(png)


if __name__ == "__main__":
    main(*sys.argv[1:3])
