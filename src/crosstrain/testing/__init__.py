"""Test helpers shipped with crosstrain: the backend conformance suite (`crosstrain.testing.conformance`)."""
