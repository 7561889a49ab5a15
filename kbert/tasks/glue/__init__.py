"""GLUE sentence (pair) classification and regression."""
