# Stands for the original's train.py, which the job's command runs: the corpus compares requests, not code.
