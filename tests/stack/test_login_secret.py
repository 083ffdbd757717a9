"""The stack `socialbench up` starts signs logins with its own secret, kept private."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import httpx
import jwt
import pytest

from socialbench.stack import launcher
from tests.e2e.support import FORM, new_user

pytestmark = pytest.mark.e2e

OLD_PUBLIC_DEFAULT = "socialbench-login-token-secret-change-me"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


def token(secret: str, user_id: int, username: str) -> str:
    payload = {"user_id": str(user_id), "username": username,
               "timestamp": str(int(time.time())), "ttl": "3600"}
    return jwt.encode(payload, secret, algorithm="HS256")


def test_a_token_signed_with_the_old_public_default_is_refused(
    client: httpx.Client, base_url: str, stack_dir: Path
) -> None:
    user_id, name = new_user(client)
    forged = token(OLD_PUBLIC_DEFAULT, user_id, name)
    with httpx.Client(base_url=base_url, cookies={"login_token": forged}) as attacker:
        assert attacker.get("/api/user/get_follower").status_code == 401
        assert attacker.get("/api/home-timeline/read?start=0&stop=10").status_code == 401
        posted = attacker.post("/api/post/compose", content="text=forged&post_type=0",
                               headers=FORM)
        assert posted.status_code == 401
        upload = attacker.post("/upload-media", files={"media": ("a.png", PNG, "image/png")})
        assert upload.status_code == 401
    # The stack's own secret (its data dir's file) is the one that signs.
    secret = (stack_dir / launcher.SECRET_FILE).read_text().strip()
    with httpx.Client(base_url=base_url,
                      cookies={"login_token": token(secret, user_id, name)}) as owner:
        assert owner.get("/api/user/get_follower").status_code == 200


def test_the_secret_file_is_private_and_in_no_state_config_or_log(stack_dir: Path) -> None:
    path = stack_dir / launcher.SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().strip()
    assert len(secret) >= 32
    places = [stack_dir / launcher.STATE_FILE, stack_dir / launcher.CONFIG_FILE,
              *sorted((stack_dir / "logs").glob("*.log"))]
    for place in places:
        assert secret not in place.read_text(errors="replace"), place


def test_uploads_through_nginx_need_a_login_and_an_image(
    client: httpx.Client, base_url: str
) -> None:
    user_id, name = new_user(client)
    assert client.post("/upload-media", files={"media": ("a.png", PNG, "image/png")}
                       ).status_code == 401
    login = client.post("/api/user/login", headers=FORM,
                        content=f"username={name}&password=password_{user_id}")
    cookie = login.cookies.get("login_token")
    assert cookie
    with httpx.Client(base_url=base_url, cookies={"login_token": cookie}) as logged_in:
        page = logged_in.post("/upload-media",
                              files={"media": ("a.html", b"<script>1</script>", "text/html")})
        assert page.status_code == 415
        image = logged_in.post("/upload-media", files={"media": ("a.png", PNG, "image/png")})
        assert image.status_code == 200, image.text
