"""The example's training package: data and model, imported by train.py from the shipped folder."""
