"""The front end's own pages in a real browser (Debian's chromium, headless, via Playwright).

Two new users sign up on the sign-up page; B logs in and follows A on the contacts page;
A logs in and posts a text with an image (a PNG made here) from the home page; B logs in
again and sees the post on the home timeline with the image really loaded.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path

import httpx
import pytest

from tests.e2e.support import CHROMIUM, CHROMIUM_FLAGS, needs_chromium

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.e2e, needs_chromium]
WAIT_MS = 20_000  # upper bound for each wait below; they normally take well under a second
IMAGE_WIDTH, IMAGE_HEIGHT = 7, 5


def png(width: int, height: int) -> bytes:
    """A small RGB PNG (a gradient), written by hand."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(  # each row: filter type 0, then RGB pixels
        b"\x00" + b"".join(bytes((x * 30 % 256, y * 40 % 256, 200)) for x in range(width))
        for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def sign_up(page: sync_api.Page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/signup.html")
    page.get_by_label("First name").fill("First")
    page.get_by_label("Last name").fill("Last")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign up").click()
    page.wait_for_url("**/index.html", timeout=WAIT_MS)  # the server sends it to log in


def log_in(page: sync_api.Page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/index.html")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/main.html", timeout=WAIT_MS)


def test_a_post_with_an_image_reaches_a_followers_home_timeline(base_url: str,
                                                                 tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:10]
    author, follower = f"web_author_{run}", f"web_follower_{run}"
    password = f"pw-{run}"
    text = f"A picture from the browser {run}"
    image = png(IMAGE_WIDTH, IMAGE_HEIGHT)
    screenshot = tmp_path / "home-timeline.png"

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            for username in (author, follower):
                sign_up(page, base_url, username, password)

            log_in(page, base_url, follower, password)
            page.get_by_role("link", name="Contacts").click()
            page.get_by_label("Follow or unfollow a username").fill(author)
            page.get_by_role("button", name="Follow", exact=True).click()
            sync_api.expect(page.locator("#follow-status")).to_have_text("Following.",
                                                                         timeout=WAIT_MS)
            sync_api.expect(page.locator("#followees li")).to_have_count(1, timeout=WAIT_MS)

            page.get_by_role("link", name="Log out").click()
            log_in(page, base_url, author, password)
            page.get_by_label("What is happening?").fill(text)
            page.get_by_label("Image (optional)").set_input_files(
                files=[{"name": "picture.png", "mimeType": "image/png", "buffer": image}])
            page.get_by_role("button", name="Post").click()
            sync_api.expect(page.locator("#compose-status")).to_have_text("Posted.",
                                                                          timeout=WAIT_MS)

            page.get_by_role("link", name="Log out").click()
            log_in(page, base_url, follower, password)
            post = page.locator("#timeline .post").filter(has_text=text)
            sync_api.expect(post).to_have_count(1, timeout=WAIT_MS)
            sync_api.expect(post.locator(".meta")).to_contain_text(f"@{author}")
            img = post.locator("img")
            sync_api.expect(img).to_have_count(1)
            # Loaded and decoded: a broken or missing image has naturalWidth 0.
            img.evaluate("i => i.decode().catch(() => null)")
            size = img.evaluate("i => [i.complete, i.naturalWidth, i.naturalHeight]")
            source = img.evaluate("i => i.currentSrc")
            page.screenshot(path=str(screenshot), full_page=True)
            print(f"\nhome timeline screenshot: {screenshot}")
            assert not errors, errors
        finally:
            browser.close()

    assert size == [True, IMAGE_WIDTH, IMAGE_HEIGHT], (size, source)
    # The image is the uploaded file, byte for byte, in both forms of the media route (the
    # original's pages use /get-media/?filename=…).
    filename = httpx.URL(source).params["filename"]
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for path in ("/get-media", "/get-media/"):
            response = client.get(path, params={"filename": filename})
            assert response.status_code == 200, (path, response.text)
            assert response.content == image, path
