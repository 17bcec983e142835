"""Each platform's create-body schema, derived from its SDK by `generate.py`: what `targets.<target>.patch` is
checked against at render (`crosstrain.patch`)."""
