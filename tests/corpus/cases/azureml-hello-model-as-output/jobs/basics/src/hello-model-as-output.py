# Stands for the original's hello-model-as-output.py, which the command runs: the corpus compares requests.
