# Stands for the original's aml_run.py, which the command runs: the corpus compares requests, not code.
