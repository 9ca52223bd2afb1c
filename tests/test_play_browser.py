"""`agl play` in a real headless Chromium (Debian's package), on the demo set.

Plays a clip (and seeks in it), clicks the map, submits, reads the error the page shows,
checks the saved prediction and its distance, then restarts the server and checks the game
resumes at the next clip. The page runs under its own Content-Security-Policy throughout.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agl.core.geo import geodesic_km
from agl.dataset.manifest import clips, load_manifest
from agl.predictions.records import Status, read_predictions

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium_path() -> Path:
    from helpers import require_chromium

    return require_chromium()


@pytest.fixture(scope="module")
def demo_set(tmp_path_factory, fresh_demo) -> Path:
    return fresh_demo(tmp_path_factory.mktemp("demo") / "data")


class PlayServer:
    """`agl play` as a subprocess; the URL is the one it prints."""

    def __init__(self, manifest: Path, run_dir: Path, player: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agl.cli", "play", "--manifest", str(manifest),
             "--player", player, "--out", str(run_dir), "--port", "0", "--no-browser"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.proc.stdout.readline()),
                         daemon=True).start()
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            self.stop()
            pytest.fail("agl play printed no URL within 60 s")
        match = re.search(r"http://127\.0\.0\.1:\d+/", first)
        if not match:
            self.stop()
            pytest.fail(f"agl play did not start: {first!r} {self.proc.stderr.read()}")
        self.url = match.group(0)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out


def test_play_a_clip_in_chromium_then_resume_after_restart(chromium_path, demo_set, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    manifest = demo_set / "manifest.csv"
    ordered = clips(load_manifest(manifest))
    first, second = ordered[0], ordered[1]
    run_dir = tmp_path / "runs" / "human-ada"
    guess_lat, guess_lon = 40.0, -3.5  # near Madrid

    server = PlayServer(manifest, run_dir, "ada")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1300, "height": 800})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url)
            expect(page.locator("body")).to_have_attribute("data-ready", "1", timeout=20_000)
            expect(page.locator("body")).to_have_attribute("data-clip", first.key)
            expect(page.locator("#progress")).to_contain_text(f"0 of {len(ordered)} answered")

            # Play, then seek: the server's Range support is what makes the player seekable.
            played = page.evaluate(
                """() => new Promise((resolve, reject) => {
                    const a = document.getElementById("player");
                    a.addEventListener("timeupdate", () => {
                        if (a.currentTime > 0.2) resolve(a.currentTime);
                    });
                    a.addEventListener("error", () => reject(new Error("audio error")));
                    a.play().catch(reject);
                })"""
            )
            assert played > 0.2
            seeked = page.evaluate(
                """() => new Promise((resolve) => {
                    const a = document.getElementById("player");
                    a.addEventListener("seeked", () => resolve(a.currentTime), {once: true});
                    a.currentTime = a.duration / 2;
                })"""
            )
            assert seeked == pytest.approx(first.seconds / 2, abs=1.0)

            box = page.locator("#map svg").bounding_box()
            x = box["x"] + (guess_lon + 180) / 360 * box["width"]
            y = box["y"] + (90 - guess_lat) / 180 * box["height"]
            page.mouse.click(x, y)
            expect(page.locator("#pin")).to_contain_text("°")
            page.fill("#country", "Spain")
            page.select_option("#continent", "Europe")
            page.click("#submit")
            expect(page.locator("#result")).to_be_visible()
            shown_km = float(page.text_content("#error-km"))
            expect(page.locator("#truth-place")).to_contain_text(first.country)
            expect(page.locator("#truth-pin")).to_have_count(1)
            expect(page.locator("#map polyline.arc")).not_to_have_count(0)
            expect(page.locator("#progress")).to_contain_text(f"1 of {len(ordered)} answered")
            assert errors == []
            browser.close()
    finally:
        server.stop()

    saved = read_predictions(run_dir / "predictions.jsonl")
    assert list(saved) == [first.key]
    p1 = saved[first.key]
    assert p1.status is Status.PARTIAL and p1.missing == ("city",)
    assert (p1.country, p1.continent) == ("Spain", "Europe")
    assert p1.meta["backend"] == "human" and p1.meta["model"] == "ada"
    assert p1.meta["listened_s"] > 0
    # The click landed where it was aimed (within a screen pixel of the 1300-px-wide page).
    assert p1.latitude == pytest.approx(guess_lat, abs=0.6)
    assert p1.longitude == pytest.approx(guess_lon, abs=0.6)
    true_km = float(geodesic_km(p1.latitude, p1.longitude, first.latitude, first.longitude))
    assert shown_km == pytest.approx(true_km, abs=0.06)

    # A new server on the same run continues at the next clip; a skip there is a refusal.
    server = PlayServer(manifest, run_dir, "ada")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(server.url)
            expect(page.locator("body")).to_have_attribute("data-ready", "1", timeout=20_000)
            expect(page.locator("body")).to_have_attribute("data-clip", second.key)
            expect(page.locator("#clip-number")).to_have_text("2")
            page.click("#skip")
            expect(page.locator("#result-title")).to_have_text("Skipped.")
            expect(page.locator("#error-line")).to_be_hidden()
            page.click("#next")
            expect(page.locator("body")).to_have_attribute("data-clip", ordered[2].key)
            browser.close()
    finally:
        out = server.stop()
    assert "stopped; 2/" in out
    saved = read_predictions(run_dir / "predictions.jsonl")
    assert list(saved) == [first.key, second.key]
    assert saved[second.key].status is Status.REFUSED
