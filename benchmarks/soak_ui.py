"""What a person sees after the soak: screenshots of the UI of the soak's own platform,
taken in Debian's headless Chromium (Playwright never downloads a browser here), into
`.data/soak/seed-<seed>/ui/`. The pages: the failed runs, a run whose process was killed,
the retry of one and the run a sensor asked for again, the assets' partitions, and the
ticks of two file sensors that failed (the code server was down) before they resumed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import dagster as dg

CHROMIUM = Path("/usr/bin/chromium")


def _first(instance: dg.DagsterInstance, tag: str) -> dg.DagsterRun | None:
    runs = [r for r in instance.get_runs() if tag in r.tags]
    return runs[-1] if runs else None


def pages(instance: dg.DagsterInstance) -> dict[str, str]:
    """Screenshot name -> path on the webserver."""
    shown = {
        "failed-runs": "/runs?q%5B0%5D=status%3AFAILURE",
        "visits_daily-partitions": "/assets/visits_daily?view=partitions",
        "visits_weekly-partitions": "/assets/visits_weekly?view=partitions",
        "user_events": "/assets/user_events",
        "telemetry_files-failed-ticks": "/locations/lakehouse/sensors/telemetry_files",
        "event_batch_files-failed-ticks": "/locations/lakehouse/sensors/event_batch_files",
    }
    retried = _first(instance, "dagster/parent_run_id")
    if retried is not None:
        shown["killed-run"] = f"/runs/{retried.tags['dagster/parent_run_id']}"
        shown["its-retry"] = f"/runs/{retried.run_id}"
    again = _first(instance, "lakehouse/again_of")
    if again is not None:
        shown["asked-again-run"] = f"/runs/{again.run_id}"
    return shown


def screenshots(url: str, instance: dg.DagsterInstance, folder: Path) -> list[Path]:
    """Takes them; none when Chromium or Playwright is missing (says so)."""
    try:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("   (no screenshots: Playwright is a dev dependency, `make setup` installs it)")
        return []
    if not CHROMIUM.exists():
        print(f"   (no screenshots: {CHROMIUM} is missing; apt-get install chromium)")
        return []
    folder.mkdir(parents=True, exist_ok=True)
    taken = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(60_000)
        for name, path in pages(instance).items():
            page.goto(url + path)
            page.wait_for_timeout(4000)
            # A first visit asks to join the community, once the page has loaded (seconds,
            # on a platform just out of the soak): the dialog hides the page.
            with contextlib.suppress(PlaywrightTimeout):
                page.get_by_role("button", name="Skip").click(timeout=3000)
                page.wait_for_timeout(1000)
            if name.endswith("-failed-ticks"):
                # The ticks that failed while the code server was down, and what they said.
                page.get_by_text("All ticks").first.click()
                page.get_by_text("Failed", exact=True).last.click()
                page.wait_for_timeout(3000)
            taken.append(folder / f"{name}.png")
            page.screenshot(path=str(taken[-1]))
        browser.close()
    return taken
