"""The parsers of client input in socialbench.runtime.web: ids, forms (and timeline pages)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import pytest
from fastapi import Request
from hypothesis import example, given
from hypothesis import strategies as st

from socialbench.runtime.errors import InvalidArgument
from socialbench.runtime.timelines import MAX_TIMELINE_INDEX, parse_page
from socialbench.runtime.web import MAX_FORM_FIELDS, MAX_INT64, form_args, parse_form, parse_int

# ------------------------------------------------------------------ parse_int


@pytest.mark.parametrize("value", ["0", "7", "007", "9223372036854775807"])
def test_parse_int_reads_ascii_digits_in_range(value: str) -> None:
    assert parse_int(value, "user_id") == int(value)


@pytest.mark.parametrize(
    "value",
    [
        "-1",  # negative
        "+5", "-0",  # signs
        " 5", "5 ", "5\n", "\t5",  # whitespace
        "1_0",  # an underscore, which int() reads as 10
        "\u0667", "1\u0660", "\uff15",  # Arabic-Indic and full-width digits, which int() reads
        "9223372036854775808",  # 2**63: past the signed 64-bit range
        "99999999999999999999999",  # the tester's
        "1" * 5000,  # past int()'s own digit limit
        "", "0x10", "1e3", "1.0", "one",
    ],
)
def test_parse_int_refuses_anything_else_with_a_400(value: str) -> None:
    message = r"^user_id must be an integer in \[0, 9223372036854775807\]"
    with pytest.raises(InvalidArgument, match=message):
        parse_int(value, "user_id")
    assert InvalidArgument.status_code == 400


def test_parse_int_takes_a_lower_cap() -> None:
    assert parse_int("3", "post_type", high=3) == 3
    with pytest.raises(InvalidArgument, match=r"in \[0, 3\]"):
        parse_int("4", "post_type", high=3)


@given(st.text())
@example("\u0667")
@example("1_0")
@example(" 1")
@example("-1")
@example("9" * 19)
def test_parse_int_returns_an_id_that_round_trips_or_refuses(value: str) -> None:
    try:
        number = parse_int(value, "n")
    except InvalidArgument:
        return
    assert 0 <= number <= MAX_INT64
    assert value.isascii() and value.isdigit() and int(value) == number
    assert parse_int(str(number), "n") == number


@given(st.integers(min_value=0, max_value=MAX_INT64))
def test_every_id_parses(number: int) -> None:
    assert parse_int(str(number), "n") == number


@given(st.integers().filter(lambda n: n < 0 or n > MAX_INT64))
def test_no_integer_out_of_range_parses(number: int) -> None:
    with pytest.raises(InvalidArgument):
        parse_int(str(number), "n")


# ------------------------------------------------------------------ parse_page


@given(st.text(), st.text())
@example("-3", "10")
@example("0", "2147483649")
@example("\u0663", "5")
def test_parse_page_returns_a_page_in_range_or_refuses(start: str, stop: str) -> None:
    try:
        first, last = parse_page(start, stop)
    except InvalidArgument:
        return
    assert 0 <= first <= MAX_TIMELINE_INDEX and 0 <= last <= MAX_TIMELINE_INDEX
    assert (int(start), int(stop)) == (first, last) and (start + stop).isascii()


def test_parse_page_says_which_rule_failed() -> None:
    with pytest.raises(InvalidArgument, match=r"^start and stop must be in"):
        parse_page("-3", "10")
    with pytest.raises(InvalidArgument, match=r"^start must be an integer"):
        parse_page("zero", "10")
    assert parse_page("5", "2") == (5, 2)  # stop < start: an empty page, as the original


# ------------------------------------------------------------------ forms


def test_a_form_is_read_as_the_original_sends_it() -> None:
    raw = b'username=a b&text=hi @b http://x.y/z "q" [1]&media_ids=["1"]&empty='
    assert parse_form(raw) == {
        "username": "a b", "text": 'hi @b http://x.y/z "q" [1]', "media_ids": '["1"]',
        "empty": "",
    }
    assert parse_form(b"text=caf%C3%A9+%E2%9C%93") == {"text": "café ✓"}


@pytest.mark.parametrize(
    "raw",
    [
        b"text=\xff",  # a byte that is never UTF-8
        b"text=caf\xe9",  # Latin-1
        b"text=\xed\xa0\x80",  # a surrogate, encoded
        b"text=%FF",  # the same, percent-encoded
        b"text=%ED%A0%80",
        b"te%C3xt=1",  # in a name
    ],
)
def test_a_form_that_is_not_utf8_is_a_400_not_replaced(raw: bytes) -> None:
    with pytest.raises(InvalidArgument, match="is not valid UTF-8"):
        parse_form(raw)


def test_a_form_with_too_many_fields_is_a_400() -> None:
    fields = "&".join(f"f{n}=1" for n in range(MAX_FORM_FIELDS + 1))
    with pytest.raises(InvalidArgument, match="more than"):
        parse_form(fields.encode())


@given(st.binary())
@example(b"a=%ff")
@example(b"\xc3")
@example(b"=&&=")
@example(b"a=1;b=2")
def test_parse_form_returns_strings_or_refuses(raw: bytes) -> None:
    try:
        args = parse_form(raw)
    except InvalidArgument:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in args.items())
    assert parse_form(urlencode(args).encode()) == args  # what it read, it reads again


form_dicts = st.dictionaries(
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=50),
    max_size=MAX_FORM_FIELDS,
)


@given(form_dicts)
def test_every_url_encoded_form_round_trips(args: dict[str, str]) -> None:
    assert parse_form(urlencode(args, quote_via=quote).encode()) == args


def _request(query: bytes, body: bytes, content_type: str) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {
        "type": "http", "method": "POST", "path": "/", "query_string": query,
        "headers": [(b"content-type", content_type.encode())],
    }
    return Request(scope, receive)


async def test_form_args_reads_the_query_and_the_body_strictly() -> None:
    form = "application/x-www-form-urlencoded"
    request = _request(b"a=1&b=%C3%A9", b"b=2&c=\xc3\xa9", form)
    assert await form_args(request) == {"a": "1", "b": "2", "c": "é"}
    with pytest.raises(InvalidArgument, match="query string is not valid UTF-8"):
        await form_args(_request(b"user_id=%FF", b"", form))
    with pytest.raises(InvalidArgument, match="query string is not valid UTF-8"):
        await form_args(_request(b"user_id=\xff", b"", form))
    with pytest.raises(InvalidArgument, match="form body is not valid UTF-8"):
        await form_args(_request(b"", b"text=\xff", form))
    # A multipart body is the upload's to read, not a form's.
    assert await form_args(_request(b"a=1", b"\xff", "multipart/form-data; boundary=x")) == {
        "a": "1"}
