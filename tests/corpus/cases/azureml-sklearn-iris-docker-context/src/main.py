# Stands for the original's main.py, which the job's command runs: the corpus compares requests, not code.
