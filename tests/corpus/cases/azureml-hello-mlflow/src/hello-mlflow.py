# Stands for the original's hello-mlflow.py, which the job's command runs: the corpus compares requests, not code.
