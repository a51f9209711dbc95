"""A user launches the example pipeline from the Dagster UI, in a real browser.

`dagster-webserver` serves `example_project.definitions` from a temporary DAGSTER_HOME;
Debian's Chromium, driven by Playwright, clicks "Materialize all" on the asset group page,
follows the launch toast to the run and reads ai_executor's engine events in the run log,
then opens an asset's metadata plots, where the UI draws the figures of the `AssetObservation`
that ai_executor wrote for the step beside its materialization (docs/cost.md).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterRun, DagsterRunStatus
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect, sync_playwright

from .e2e_support import (
    ARTIFACTS,
    BROWSER_ARGS,
    ExampleEnv,
    Services,
    example_env,
    free_port,
    http_ok,
    wait_until,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

STARTUP_TIMEOUT_S = 150
RUN_TIMEOUT_S = 180
PAGE_TIMEOUT_MS = 60_000
BIN = Path(sys.executable).parent
LAUNCHES = [
    "Launching step 'tiles_north' on local with xs: 1 CPU / 2Gi (attempt 1)",
    "Launching step 'mosaic' on local with xl: 72 CPU / 450Gi (attempt 1)",
    "Launching step 'vegetation_index' on local tenant 'vision' with gpu-1: 8 CPU / 48Gi / 1 GPU"
    " (attempt 1)",
    "Launching step 'risk_scores' on local tenant 'vision' with s: 4 CPU / 16Gi (attempt 1)",
]
# Numeric figures of the step's observation, drawn by the UI as plots over time.
PLOTTED = ["k8s_ai/cpu_seconds", "k8s_ai/memory_gib_seconds", "k8s_ai/wall_seconds"]


@pytest.fixture
def webserver(tmp_path: Path) -> Iterator[tuple[ExampleEnv, str]]:
    example = example_env(tmp_path, with_daemon=False)
    port = free_port()
    services = Services()
    try:
        server = services.start(
            "dagster-webserver",
            [str(BIN / "dagster-webserver"), "-m", "example_project.definitions"]
            + ["-h", "127.0.0.1", "-p", str(port)],
            example.env,
            example.logs / "webserver.log",
        )
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: http_ok(f"{url}/server_info"),
            timeout_s=STARTUP_TIMEOUT_S,
            what="dagster-webserver to answer",
            services=[server],
        )
        yield example, url
    finally:
        services.stop_all()


@pytest.fixture
def page(tmp_path: Path, chromium: str) -> Iterator[Page]:
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=chromium,
            headless=True,
            args=BROWSER_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(PlaywrightError):
                page.screenshot(path=str(ARTIFACTS / "ui-last-page.png"))
        finally:
            context.close()


def test_materialize_all_in_the_ui_runs_every_step_through_ai_executor(
    page: Page, webserver: tuple[ExampleEnv, str]
) -> None:  # `page` first: without Chromium the test stops before the webserver starts
    example, url = webserver
    page.goto(f"{url}/asset-groups/vegetation")
    page.get_by_role("button", name="Materialize all").click()

    view = page.get_by_role("link", name="View", exact=True)
    view.wait_for()
    run_id = str(view.get_attribute("href")).rsplit("/", 1)[-1]
    view.click()
    page.wait_for_url(f"**/runs/{run_id}")

    with example.instance() as instance:
        run = wait_until(
            lambda: _finished(instance.get_run_by_id(run_id)),
            timeout_s=RUN_TIMEOUT_S,
            what=f"run {run_id} launched from the UI to finish",
        )
    assert run.status is DagsterRunStatus.SUCCESS
    expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=PAGE_TIMEOUT_MS)

    log_filter = page.get_by_placeholder("Filter")
    for message in LAUNCHES:
        log_filter.fill(message)
        expect(page.get_by_text(message).first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
    log_filter.fill("Launching step")
    page.keyboard.press("Escape")
    expect(page.get_by_text("step:mosaic")).to_be_hidden(timeout=PAGE_TIMEOUT_MS)
    expect(page.get_by_text(LAUNCHES[-1]).first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-run.png"))

    page.goto(f"{url}/assets/mosaic?view=overview")
    page.get_by_role("button", name="Plots").click()
    expect(page.get_by_placeholder("Filter metadata keys")).to_be_hidden(timeout=PAGE_TIMEOUT_MS)
    for label in PLOTTED:
        expect(page.get_by_text(label, exact=True).first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
    assert page.locator("canvas").count() >= len(PLOTTED)  # a chart under each heading
    page.screenshot(path=str(ARTIFACTS / "ui-asset-plots.png"), full_page=True)


def _finished(run: DagsterRun | None) -> DagsterRun | None:
    return run if run is not None and run.is_finished else None
