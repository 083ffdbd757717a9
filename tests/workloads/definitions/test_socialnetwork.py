from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from socialbench.workloads.definitions.core import Request, Workload, WorkloadError, load_workload
from socialbench.workloads.definitions.socialnetwork import ComposePost, Mixed, ReadHomeTimeline
from socialbench.workloads.driver.config import Target
from socialbench.workloads.driver.http import RequestEncoder

FORM = "application/x-www-form-urlencoded"
COMPOSE_FIELDS = ["username", "user_id", "text", "media_ids", "media_types", "post_type"]
TEXT = re.compile(
    r"(?P<text>[A-Za-z0-9]{256})(?P<mentions>( @username_\d+)+)(?P<urls>( http://[A-Za-z0-9]{64})+)"
)


def parse_form(body: bytes) -> dict[str, str]:
    """The fields of a raw (not url-encoded) form body, in order."""
    return dict(pair.split("=", 1) for pair in body.decode().split("&"))


def test_compose_post_bodies_have_the_contract_fields_and_ranges() -> None:
    workload = ComposePost(users=962)
    rng = random.Random(7)
    mention_counts, url_counts, media_counts = Counter[int](), Counter[int](), Counter[int]()
    for _ in range(2000):
        request = workload.next_request(rng)
        assert (request.method, request.path) == ("POST", "/wrk2-api/post/compose")
        assert request.headers == (("Content-Type", FORM),)
        assert request.body is not None
        fields = parse_form(request.body)
        assert list(fields) == COMPOSE_FIELDS
        user = int(fields["user_id"])
        assert 0 <= user < 962 and fields["username"] == f"username_{user}"
        match = TEXT.fullmatch(fields["text"])
        assert match is not None, fields["text"]
        mentioned = [int(m) for m in re.findall(r"@username_(\d+)", match["mentions"])]
        assert all(0 <= m < 962 and m != user for m in mentioned)
        mention_counts[len(mentioned)] += 1
        url_counts[match["urls"].count(" http://")] += 1
        media_ids, media_types = json.loads(fields["media_ids"]), json.loads(fields["media_types"])
        assert all(re.fullmatch(r"\d{18}", m) for m in media_ids)
        assert media_types == ["png"] * len(media_ids)
        media_counts[len(media_ids)] += 1
        assert fields["post_type"] == "0"
    assert set(mention_counts) == set(range(1, 7))
    assert set(url_counts) == set(range(1, 7))
    assert set(media_counts) == set(range(1, 6))


def test_timeline_reads_page_ten_posts_from_a_start_in_0_to_100() -> None:
    rng = random.Random(3)
    starts = set()
    for _ in range(3000):
        request = ReadHomeTimeline(users=50).next_request(rng)
        path, query = request.path.split("?")
        assert path == "/wrk2-api/home-timeline/read"
        fields = dict(pair.split("=") for pair in query.split("&"))
        assert list(fields) == ["user_id", "start", "stop"]
        assert 0 <= int(fields["user_id"]) < 50
        assert int(fields["stop"]) == int(fields["start"]) + 10
        starts.add(int(fields["start"]))
        assert request.body is None and request.headers == (("Content-Type", FORM),)
    assert starts == set(range(101))


def test_mixed_is_60_30_10_within_2_percent_over_10k_draws() -> None:
    rng = random.Random(11)
    workload = Mixed()
    names = Counter(workload.next_request(rng).name for _ in range(10_000))
    assert abs(names["read-home-timeline"] / 10_000 - 0.60) <= 0.02
    assert abs(names["read-user-timeline"] / 10_000 - 0.30) <= 0.02
    assert abs(names["compose-post"] / 10_000 - 0.10) <= 0.02


def test_the_same_seed_gives_the_same_requests() -> None:
    first = [Mixed().next_request(random.Random(5)) for _ in range(3)]
    again = [Mixed().next_request(random.Random(5)) for _ in range(3)]
    assert first == again


def test_requests_are_the_bytes_wrk_format_builds() -> None:
    encode = RequestEncoder(Target.parse("http://localhost:8080"))
    read = Request("GET", "/wrk2-api/home-timeline/read?user_id=5&start=3&stop=13",
                   (("Content-Type", FORM),))
    assert encode(read) == (
        b"GET http://localhost:8080/wrk2-api/home-timeline/read?user_id=5&start=3&stop=13 "
        b"HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Host: localhost:8080\r\n\r\n"
    )
    compose = Request("POST", "/wrk2-api/post/compose", (("Content-Type", FORM),), b"a=b c")
    assert encode(compose) == (
        b"POST http://localhost:8080/wrk2-api/post/compose HTTP/1.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nHost: localhost:8080\r\n"
        b"Content-Length: 5\r\n\r\na=b c"
    )
    origin = RequestEncoder(Target.parse("http://127.0.0.1:9/"), absolute_form=False)
    assert origin(Request("GET", "/x")) == b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"


def test_builtin_workloads_load_by_name_with_their_options() -> None:
    mixed = load_workload("mixed", users=10, path="/ignored")
    assert isinstance(mixed, Mixed) and mixed.users == 10
    url = load_workload("url", users=10, path="/ping?x=1")
    assert url.fixed and url.next_request(random.Random()).path == "/ping?x=1"


def test_a_users_workload_loads_from_a_file(tmp_path: Path) -> None:
    source = tmp_path / "mine.py"
    source.write_text(
        "from socialbench.workloads.definitions.core import Request\n"
        "class Pings:\n"
        "    name = 'pings'\n"
        "    fixed = False\n"
        "    def __init__(self, users=1):\n"
        "        self.users = users\n"
        "    def next_request(self, rng):\n"
        "        return Request('GET', f'/ping/{rng.randrange(self.users)}')\n"
    )
    workload = load_workload(f"{source}:Pings", users=3, path="/")
    assert isinstance(workload, Workload)
    paths = {workload.next_request(random.Random(i)).path for i in range(50)}
    assert paths == {"/ping/0", "/ping/1", "/ping/2"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [("nonesuch", "unknown workload"), ("/no/such/file.py:X", "does not exist")],
)
def test_bad_workload_specs_say_why(spec: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_workload(spec)


def test_a_file_without_the_class_says_so(tmp_path: Path) -> None:
    source = tmp_path / "empty.py"
    source.write_text("x = 1\n")
    with pytest.raises(WorkloadError, match="no class or function 'Missing'"):
        load_workload(f"{source}:Missing")
