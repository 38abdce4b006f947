"""Properties of the character tokenizer (reference/tokenizer.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reference.model import Config
from reference.tokenizer import VOCAB, VOCAB_SIZE, decode, encode

in_vocab = st.text(alphabet=VOCAB, max_size=200)
out_of_vocab = st.characters().filter(lambda ch: ch not in VOCAB)


@given(in_vocab)
@example("")
@example("\n")
@example("Hello, world!\n  ~tilde~ and `backticks`")
def test_decoding_the_encoding_gives_back_the_text(text):
    assert decode(encode(text)) == text


@given(in_vocab)
def test_every_character_becomes_one_id_inside_the_vocabulary(text):
    ids = encode(text)
    assert len(ids) == len(text)
    assert all(0 <= i < VOCAB_SIZE for i in ids)


def test_the_vocabulary_is_96_distinct_symbols_newline_then_printable_ascii():
    assert VOCAB_SIZE == len(set(VOCAB)) == 96
    assert VOCAB == "\n" + "".join(chr(c) for c in range(32, 127))


def test_the_default_model_config_has_the_tokenizers_vocabulary_size():
    assert Config().vocab_size == VOCAB_SIZE


@given(in_vocab, out_of_vocab, in_vocab)
@example("ab", "\t", "c")
@example("", "é", "")
def test_an_out_of_vocabulary_character_is_named_with_its_position(prefix, ch, suffix):
    with pytest.raises(ValueError) as info:
        encode(prefix + ch + suffix)
    assert repr(ch) in str(info.value)
    assert f"position {len(prefix)}" in str(info.value)


@pytest.mark.parametrize(
    "ids",
    [[96], [-1], [1.0], [True], [np.array(1.5)], [np.array(True)], [np.True_], np.array([[1, 2]])],
    ids=["too-big", "negative", "float", "bool", "0-d-float", "0-d-bool", "numpy-bool", "2-d"],
)
def test_decoding_an_id_outside_the_vocabulary_raises_a_value_error(ids):
    with pytest.raises(ValueError, match="position 0"):
        decode(ids)


@pytest.mark.parametrize("ids", [None, 5, "ab", b"ab", np.array(5)], ids=["none", "int", "str", "bytes", "0-d-array"])
def test_decoding_what_is_not_a_sequence_of_ids_raises_a_value_error_naming_its_type(ids):
    with pytest.raises(ValueError, match=f"decode takes a sequence of token ids, got {type(ids).__name__}"):
        decode(ids)


def test_decoding_takes_numpy_integers_and_arrays_of_ids():
    assert decode(np.array([1, 2])) == decode([np.int64(1), np.array(2)]) == " !"
