"""Stop sequences are cut even when they arrive split across pieces."""

from __future__ import annotations

from engines.generation.stop_matcher import StopMatcher


def run(stops, pieces):
    matcher = StopMatcher(stops)
    out = []
    for piece in pieces:
        text, stopped = matcher.push(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


def test_stop_split_across_pieces():
    assert run(["END"], ["hello E", "N", "D more"]) == ("hello ", True)


def test_partial_prefix_that_is_not_a_stop_is_released():
    assert run(["END"], ["hello E", "N", "x"]) == ("hello ENx", False)


def test_no_stops_pass_through():
    assert run([], ["a", "b"]) == ("ab", False)


def test_earliest_of_several_stops_wins():
    assert run(["b", "cd"], ["a", "cdb"]) == ("a", True)


def test_held_text_is_flushed_at_the_end():
    assert run(["STOP"], ["abc S", "T"]) == ("abc ST", False)


def test_matched_names_the_stop_that_ended_the_text():
    matcher = StopMatcher(["b", "cd"])
    assert matcher.matched is None
    assert matcher.push("a") == ("a", False) and matcher.matched is None
    assert matcher.push("cdb") == ("", True)
    assert matcher.matched == "cd"  # the earliest in the text, not the first in the list


def test_matched_prefers_the_shortest_stop_at_the_same_place():
    matcher = StopMatcher(["END", "EN"])
    assert matcher.push("xxENDyy") == ("xx", True)
    assert matcher.matched == "EN"
