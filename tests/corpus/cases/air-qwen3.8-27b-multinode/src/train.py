# Stands for the recipe's train.py (the corpus compares requests, not code).
