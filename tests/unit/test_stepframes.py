"""A step's byte stream (gbatch/core/stepframes.py): frames both ways, fed in any pieces."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.core import stepframes as frames


def test_frames_come_back_whole_however_the_stream_is_cut() -> None:
    stream = (
        frames.frame(frames.STDOUT, b"hello\n")
        + frames.frame(frames.STDERR, b"")
        + frames.exit_frame(3, 0)
    )
    for cut in range(len(stream) + 1):
        reader = frames.FrameReader(frames.TO_CLIENT)
        got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert got == [
            (frames.STDOUT, b"hello\n"),
            (frames.STDERR, b""),
            (frames.EXIT, b"\x00\x00\x00\x03\x00\x00\x00\x00"),
        ]
        assert reader.pending == 0


@given(st.lists(st.binary(max_size=200), max_size=8), st.integers(1, 50))
def test_any_data_in_any_pieces_is_read_as_sent(chunks: list[bytes], piece: int) -> None:
    stream = b"".join(frames.frame(frames.STDIN, chunk) for chunk in chunks)
    reader = frames.FrameReader(frames.TO_STEP)
    got = []
    for start in range(0, len(stream), piece):
        got += reader.feed(stream[start : start + piece])
    assert got == [(frames.STDIN, chunk) for chunk in chunks]


def test_large_output_is_cut_into_frames_of_at_most_the_limit() -> None:
    data = bytes(range(256)) * 1000
    pieces = list(frames.data_frames(frames.STDOUT, data))
    assert len(pieces) == 4
    reader = frames.FrameReader(frames.TO_CLIENT)
    got = [payload for piece in pieces for _, payload in reader.feed(piece)]
    assert all(len(p) <= frames.MAX_PAYLOAD for p in got)
    assert b"".join(got) == data


def test_a_frame_of_the_other_direction_is_refused() -> None:
    # A client must not be able to forge an EXIT into the step's stdin, nor a step a
    # SIGNAL to its client.
    with pytest.raises(frames.FrameError, match="unexpected frame kind 13"):
        frames.FrameReader(frames.TO_STEP).feed(frames.exit_frame(0))
    with pytest.raises(frames.FrameError, match="unexpected frame kind 4"):
        frames.FrameReader(frames.TO_CLIENT).feed(frames.signal_frame(2))


def test_an_oversized_frame_is_refused_before_its_payload_is_read() -> None:
    header = frames.HEADER.pack(frames.STDIN, frames.MAX_PAYLOAD + 1)
    with pytest.raises(frames.FrameError, match="more than"):
        frames.FrameReader(frames.TO_STEP).feed(header)
    with pytest.raises(ValueError):
        frames.frame(frames.STDIN, b"x" * (frames.MAX_PAYLOAD + 1))


def test_resize_signal_and_exit_payloads_round_trip() -> None:
    reader = frames.FrameReader(frames.TO_STEP)
    ((kind, size),) = reader.feed(frames.resize_frame(50, 132))
    assert (kind, frames.read_size(size)) == (frames.RESIZE, (50, 132))
    ((kind, sig),) = reader.feed(frames.signal_frame(2))
    assert (kind, frames.read_signal(sig)) == (frames.SIGNAL, 2)
    ((_, end),) = frames.FrameReader(frames.TO_CLIENT).feed(frames.exit_frame(0, 9))
    assert frames.read_exit(end) == (0, 9)
    assert frames.read_size(frames.resize_frame(-3, 10**6)[5:]) == (0, 0xFFFF)


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x41", b"\x02\x02"])
def test_a_bad_signal_payload_is_a_frame_error(payload: bytes) -> None:
    with pytest.raises(frames.FrameError):
        frames.read_signal(payload)
    with pytest.raises(ValueError):
        frames.signal_frame(0)


def test_the_exit_status_is_a_shells() -> None:
    assert frames.exit_status(3, 0) == 3
    assert frames.exit_status(0, 9) == 137
    assert frames.exit_status(256 + 7, 0) == 7
