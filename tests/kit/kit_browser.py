"""A headless Chromium for the kit's browser tests, driven by Selenium through Debian's chromium-driver.

Debian's chromium and chromium-driver are the same version, so the WebDriver protocol always matches;
.ci/run installs both and Selenium. Without one of them, ``start_browser`` skips the calling test and says
which is missing and how to install it.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from handout.pdf import find_chromium


def _major(command: list[str]) -> int | None:
    try:
        out = subprocess.run(command, check=False, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+)\.\d+\.\d+", out)
    return int(found.group(1)) if found else None


def start_browser(what: str, width: int = 1000, height: int = 800):
    """A headless Chrome WebDriver with a ``width`` x ``height`` window; skips with the reason when there is none.
    ``what`` names what goes untested ("the feedback page"), for the skip message."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(
            "selenium is not installed (.ci/run installs it: .venv/bin/python -m pip install selenium): "
            f"{what} is not tested in a browser"
        )
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(
            "no Chromium found ($CHROMIUM, chromium, chromium-browser, google-chrome; Debian: apt-get "
            f"install chromium): {what} is not tested in a browser"
        )
    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        pytest.skip(
            f"no chromedriver found (Debian: apt-get install chromium-driver): {what} is not tested in a browser"
        )
    browser_major, driver_major = _major([chromium, "--version"]), _major([driver_path, "--version"])
    if browser_major != driver_major:
        pytest.skip(
            f"{chromium} is version {browser_major} but {driver_path} is version {driver_major}; they must "
            "match (Debian's chromium and chromium-driver do)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.prompt_for_download": False})
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
