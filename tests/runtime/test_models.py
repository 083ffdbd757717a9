"""The constrained types of internal JSON (ids, texts) and the caps of a post (issue 11)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from socialbench.runtime.errors import PayloadTooLarge
from socialbench.runtime.models import (
    MAX_ID,
    MAX_ITEMS,
    MAX_NAME_CHARS,
    MAX_STORED_TEXT_BYTES,
    MAX_TEXT_BYTES,
    MAX_USERNAME_BYTES,
    Creator,
    Id,
    IdText,
    Media,
    Post,
    PostType,
    Text,
    Url,
    UserMention,
    check_post_size,
)

ids = TypeAdapter(Id)
id_texts = TypeAdapter(IdText)
texts = TypeAdapter(Text)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=5,
)


@given(json_values)
@example(2**63)
@example(-1)
@example("5")
@example(5.0)
@example(True)
def test_an_id_is_a_json_integer_in_range_or_refused(value: object) -> None:
    try:
        number = ids.validate_python(value)
    except ValidationError:
        return
    assert type(value) is int and value == number and 0 <= number <= MAX_ID


@given(st.text())
@example("0")
@example("007")
@example("-1")
@example("\u0667")
@example("9223372036854775808")
def test_an_id_text_is_canonical_ascii_digits_in_range_or_refused(value: str) -> None:
    try:
        checked = id_texts.validate_python(value)
    except ValidationError:
        return
    assert checked == value == str(int(value)) and value.isascii()
    assert 0 <= int(value) <= MAX_ID


@given(st.integers(min_value=0, max_value=MAX_ID))
def test_every_id_is_an_id_text(number: int) -> None:
    assert id_texts.validate_python(str(number)) == str(number)


@given(st.text())
def test_a_text_is_taken_under_its_cap(value: str) -> None:
    assert texts.validate_python(value) == value  # hypothesis' texts are short


def test_a_text_over_its_cap_in_utf8_bytes_is_refused() -> None:
    texts.validate_python("é" * (MAX_TEXT_BYTES // 2))
    with pytest.raises(ValidationError) as caught:
        texts.validate_python("é" * (MAX_TEXT_BYTES // 2) + "x")
    assert caught.value.errors()[0]["type"] == "too_large"


def test_check_post_size() -> None:
    check_post_size("u" * MAX_USERNAME_BYTES, "x" * MAX_TEXT_BYTES, ["1"] * MAX_ITEMS,
                    ["png"] * MAX_ITEMS)
    for username, text, media_ids, media_types, field in [
        ("u" * (MAX_USERNAME_BYTES + 1), "", [], [], "username"),
        ("é" * (MAX_USERNAME_BYTES // 2 + 1), "", [], [], "username"),
        ("u", "x" * (MAX_TEXT_BYTES + 1), [], [], "text"),
        ("u", "", ["1"] * (MAX_ITEMS + 1), ["png"] * (MAX_ITEMS + 1), "media_ids"),
        ("u", "", ["1" * (MAX_NAME_CHARS + 1)], ["png"], "media_ids"),
    ]:
        with pytest.raises(PayloadTooLarge, match=f"^{field} "):
            check_post_size(username, text, media_ids, media_types)


def test_the_largest_composed_post_fits_a_memcached_item() -> None:
    # Every field at its cap, in 4-byte characters where a cap counts characters; urls
    # come from the text, so together they are at most the text.
    wide = "\U0001f600"
    name = wide * (MAX_USERNAME_BYTES // 4)
    text = "x" * MAX_STORED_TEXT_BYTES
    post = Post(
        post_id=str(MAX_ID), creator=Creator(user_id=str(MAX_ID), username=name),
        req_id=str(MAX_ID), text=text,
        user_mentions=[UserMention(user_id=str(MAX_ID), username=name)] * MAX_ITEMS,
        media=[Media(media_id=wide * MAX_NAME_CHARS, media_type=wide * MAX_NAME_CHARS)]
        * MAX_ITEMS,
        urls=[Url(shortened_url="http://short-url/abcdefghij",
                  expanded_url="x" * (MAX_TEXT_BYTES // MAX_ITEMS))] * MAX_ITEMS,
        timestamp=str(MAX_ID), post_type=PostType.POST,
    )
    assert len(orjson.dumps(post.model_dump(mode="json"))) < 1 << 20
