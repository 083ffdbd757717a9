"""The social network through nginx, as the original's clients use it (contract §2)."""

from __future__ import annotations

import json
import re
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.support import FORM, compose, follow, new_user, timeline, user_ids

pytestmark = pytest.mark.e2e


def test_register_and_duplicate_username_is_refused(client: httpx.Client) -> None:
    _, name = new_user(client)
    again = (f"first_name=a&last_name=b&username={name}&password=p&user_id={next(user_ids)}")
    response = client.post("/wrk2-api/user/register", content=again, headers=FORM)
    assert 400 <= response.status_code < 500
    assert name in response.text


def test_compose_reaches_every_timeline_it_should(client: httpx.Client) -> None:
    author, author_name = new_user(client)
    follower_a, _ = new_user(client)
    follower_b, _ = new_user(client)
    mentioned, mentioned_name = new_user(client)
    stranger, _ = new_user(client)
    follow(client, follower_a, author)
    follow(client, follower_b, author)
    # The contract's url pattern has no "/": a url ends at the first character outside it.
    text = f"hello @{mentioned_name} see http://example.com_a-b and more after the url"
    compose(client, author, author_name, text,
            media_ids='["111111111111111111"]', media_types='["png"]')

    [post] = timeline(client, "user", author)
    assert set(post) == {"post_id", "creator", "req_id", "text", "user_mentions", "media",
                         "urls", "timestamp", "post_type"}
    assert post["creator"] == {"user_id": str(author), "username": author_name}
    assert post["user_mentions"] == [{"user_id": str(mentioned), "username": mentioned_name}]
    assert post["media"] == [{"media_id": "111111111111111111", "media_type": "png"}]
    [url] = post["urls"]
    assert url["expanded_url"] == "http://example.com_a-b"
    assert re.fullmatch(r"http://short-url/[A-Za-z0-9]{10}", url["shortened_url"])
    assert post["text"] == text.replace("http://example.com_a-b", url["shortened_url"])
    assert post["post_type"] == 0
    assert all(isinstance(post[k], str) for k in ("post_id", "req_id", "timestamp"))

    for reader in (follower_a, follower_b, mentioned):
        assert [p["post_id"] for p in timeline(client, "home", reader)] == [post["post_id"]]
    assert timeline(client, "home", author) == []
    assert timeline(client, "home", stranger) == []

    expanded = client.get("/api/url/expand", params={"shortened_url": url["shortened_url"]})
    assert expanded.status_code == 200
    assert expanded.json()["expanded_url"] == "http://example.com_a-b"


def test_timelines_are_newest_first_and_page_with_start_stop(client: httpx.Client) -> None:
    author, name = new_user(client)
    reader, _ = new_user(client)
    follow(client, reader, author)
    for i in range(5):
        compose(client, author, name, f"post number {i}")
    texts = [p["text"] for p in timeline(client, "user", author, 0, 10)]
    assert texts == [f"post number {i}" for i in reversed(range(5))]
    page = [p["text"] for p in timeline(client, "home", reader, 1, 3)]
    assert page == ["post number 3", "post number 2"]
    assert timeline(client, "user", author, 10, 20) == []


def test_follow_and_unfollow_by_id_and_by_name(client: httpx.Client) -> None:
    author, author_name = new_user(client)
    reader, reader_name = new_user(client)
    response = client.post("/wrk2-api/user/follow", headers=FORM,
                           content=f"user_name={reader_name}&followee_name={author_name}")
    assert response.status_code == 200, response.text
    compose(client, author, author_name, "first")
    assert len(timeline(client, "home", reader)) == 1
    response = client.post("/wrk2-api/user/unfollow", headers=FORM,
                           content=f"user_name={reader_name}&followee_name={author_name}")
    assert response.status_code == 200, response.text
    compose(client, author, author_name, "second")
    assert [p["text"] for p in timeline(client, "home", reader)] == ["first"]
    follow(client, reader, author)
    follow(client, reader, author)  # twice is a no-op
    compose(client, author, author_name, "third")
    assert [p["text"] for p in timeline(client, "home", reader)] == ["third", "first"]
    response = client.post("/wrk2-api/user/unfollow", headers=FORM,
                           content=f"user_id={reader}&followee_id={author}")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/wrk2-api/post/compose", "username=username_1&user_id=1&post_type=0"),
        ("/wrk2-api/post/compose", "user_id=1&text=hi&post_type=0"),
        ("/wrk2-api/user/register", "first_name=a&last_name=b&username=zz&password=p"),
        ("/wrk2-api/user/follow", "user_id=1"),
        ("/wrk2-api/user/unfollow", "followee_name=username_1"),
        ("/api/user/login", "username=username_1"),
    ],
)
def test_missing_parameters_get_400_incomplete_arguments(
    client: httpx.Client, path: str, body: str
) -> None:
    response = client.post(path, content=body, headers=FORM)
    assert response.status_code == 400
    assert response.text.startswith("Incomplete arguments")


def test_malformed_parameters_get_400_and_store_nothing(client: httpx.Client) -> None:
    author, name = new_user(client)
    bad_bodies = [
        f"username={name}&user_id=notanumber&text=x&post_type=0",
        f"username={name}&user_id={author}&text=x&post_type=zero",
        f"username={name}&user_id={author}&text=x&post_type=0&media_ids=[1,2&media_types=[]",
        f'username={name}&user_id={author}&text=x&post_type=0&media_ids=["1"]&media_types=[]',
    ]
    for body in bad_bodies:
        response = client.post("/wrk2-api/post/compose", content=body, headers=FORM)
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
    assert timeline(client, "user", author) == []
    response = client.get("/wrk2-api/user-timeline/read",
                          params={"user_id": author, "start": "a", "stop": 10})
    assert response.status_code == 400


def test_login_sets_cookie_and_api_needs_it(client: httpx.Client, base_url: str) -> None:
    user_id, name = new_user(client)
    for path in ("/api/home-timeline/read?start=0&stop=10",
                 "/api/user-timeline/read?start=0&stop=10",
                 "/api/user/get_follower", "/api/user/get_followee"):
        assert client.get(path).status_code == 401, path
    assert client.post("/api/post/compose", content="text=x&post_type=0", headers=FORM
                       ).status_code == 401
    wrong = client.post("/api/user/login", content=f"username={name}&password=nope", headers=FORM)
    assert wrong.status_code == 401
    response = client.post("/api/user/login", headers=FORM,
                           content=f"username={name}&password=password_{user_id}")
    assert response.status_code in (302, 303)
    token = response.cookies.get("login_token")
    assert token
    with httpx.Client(base_url=base_url, cookies={"login_token": token}) as logged_in:
        posted = logged_in.post("/api/post/compose", content="text=from the web&post_type=0",
                                headers=FORM)
        assert posted.status_code == 200, posted.text
        mine = logged_in.get("/api/user-timeline/read", params={"start": 0, "stop": 10}).json()
        assert [p["text"] for p in mine] == ["from the web"]
        followees = logged_in.get("/api/user/get_followee")
        assert followees.status_code == 200 and followees.json() == []
    forged = httpx.get(base_url + "/api/user/get_follower", cookies={"login_token": token + "x"})
    assert forged.status_code == 401


def test_web_register_redirects_to_login(client: httpx.Client) -> None:
    name = f"webuser_{next(user_ids)}"
    response = client.post("/api/user/register", headers=FORM,
                           content=f"first_name=a&last_name=b&username={name}&password=pw")
    assert response.status_code in (302, 303)
    login = client.post("/api/user/login", content=f"username={name}&password=pw", headers=FORM)
    assert login.status_code in (302, 303) and login.cookies.get("login_token")


def test_media_upload_and_fetch(client: httpx.Client) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    user_id, name = new_user(client)  # uploads need a login, as from the main page
    login = client.post("/api/user/login", headers=FORM,
                        content=f"username={name}&password=password_{user_id}")
    assert login.status_code in (302, 303)
    response = client.post("/upload-media", files={"media": ("cat.png", png, "image/png")})
    assert response.status_code == 200, response.text
    media = response.json()
    assert media["media_type"] == "png" and media["media_id"].isdigit()
    fetched = client.get("/get-media", params={"filename": f"{media['media_id']}.png"})
    assert fetched.status_code == 200
    assert fetched.headers["content-type"] == "image/png"
    assert fetched.content == png
    assert client.get("/get-media", params={"filename": "123.png"}).status_code == 404


def test_compose_byte_for_byte_as_wrk2_sends_it(client: httpx.Client, base_url: str) -> None:
    author, name = new_user(client)
    mentioned, mentioned_name = new_user(client)
    text = ("aB3" * 85 + "x" + f" @{mentioned_name}" + " http://" + "Zz9" * 21 + "q")
    body = (f"username={name}&user_id={author}&text={text}"
            '&media_ids=["123456789012345678","223456789012345678"]&media_types=["png","png"]'
            "&post_type=0").encode()
    host = urlsplit(base_url)
    request = (f"POST http://localhost:8080/wrk2-api/post/compose HTTP/1.1\r\n"
               f"Host: localhost:8080\r\nContent-Type: application/x-www-form-urlencoded\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    with socket.create_connection((host.hostname, host.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert answer.endswith(b"Successfully upload post\n")
    [post] = timeline(client, "user", author)
    assert len(post["media"]) == 2 and post["user_mentions"][0]["user_id"] == str(mentioned)
    assert json.dumps(post)  # serialisable as the front end sends it
