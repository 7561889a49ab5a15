"""Extractive question answering (SQuAD v1.1 / v2.0)."""
