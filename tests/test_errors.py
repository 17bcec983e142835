"""The shared pieces of crosstrain's errors: the "did you mean" every unknown name gets."""

from __future__ import annotations

from crosstrain.errors import closest


def test_closest_names_the_likely_misspelling_or_nothing() -> None:
    assert closest("verteks", ["vertex", "azureml", "databricks"]) == "vertex"
    assert closest("vertex", ("vertex", "vortex")) == "vertex"
    assert closest("kubernetes", ["vertex", "azureml"]) is None
    assert closest("anything", []) is None
    assert closest("us-centrall1", {"us-central1": 1, "europe-west4": 2}) == "us-central1"  # any iterable: keys


def test_closest_s_cutoff_is_how_alike_a_word_must_be() -> None:
    assert closest("us-east", ["us-east1"], cutoff=0.8) == "us-east1"
    assert closest("eu-west", ["europe-west1"]) == "europe-west1"
    assert closest("eu-west", ["europe-west1"], cutoff=0.8) is None


def test_a_long_word_is_no_misspelling() -> None:
    """difflib's time grows with the square of a word's length: a word of 100 characters or more is not compared."""
    assert closest("a" * 99, ["a" * 98]) == "a" * 98
    assert closest("a" * 100, ["a" * 99]) is None
