"""Text out of tokens: characters never split across chunks, stop sequences cut exactly."""

from __future__ import annotations

from collections.abc import Sequence

from jupyter_serve.handlers.lm_text import Detokenizer, StopWatch

# A byte-level vocabulary: each token is some bytes; "é" (c3 a9) and "€" (e2 82 ac) come in
# pieces, as byte-level BPE splits characters it has not merged.
VOCAB = {1: b"caf", 2: b"\xc3", 3: b"\xa9", 4: b" ", 5: b"\xe2", 6: b"\x82", 7: b"\xac",
         8: b"!", 9: b"\xff"}  # fmt: skip


def decode(ids: Sequence[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", "replace")


def pieces(tokens: list[int]) -> list[str]:
    text = Detokenizer(decode)
    return [text.push(token) for token in tokens] + [text.flush()]


def test_a_character_in_pieces_waits_for_its_last_byte() -> None:
    assert pieces([1, 2, 3, 4, 5, 6, 7, 8]) == ["caf", "", "é", " ", "", "", "€", "!", ""]


def test_an_incomplete_character_at_the_end_is_flushed_as_a_replacement() -> None:
    assert pieces([1, 5, 6]) == ["caf", "", "", "\ufffd"]
    assert "".join(pieces([1, 9, 8])) == decode([1, 9, 8])  # an invalid byte, then more text


def feed_all(stops: list[str], parts: list[str]) -> tuple[list[str], bool]:
    watch = StopWatch(stops)
    sent = []
    for part in parts:
        text, stopped = watch.feed(part)
        sent.append(text)
        if stopped:
            return sent, True
    return [*sent, watch.flush()], False


def test_a_stop_sequence_across_chunks_cuts_the_answer_before_it() -> None:
    assert feed_all(["END"], ["abc E", "N", "D tail"]) == (["abc ", "", ""], True)
    assert feed_all(["\n\n", "###"], ["one\n", "two##", "#"]) == (["one", "\ntwo", ""], True)


def test_text_that_only_looked_like_a_stop_is_released() -> None:
    assert feed_all(["END"], ["ab E", "Nx", "!"]) == (["ab ", "ENx", "!", ""], False)
    assert feed_all(["END"], ["ab EN"]) == (["ab ", "EN"], False)  # flushed at the end
    assert feed_all([], ["as", "is"]) == (["as", "is", ""], False)
