"""Sentence similarity with a bi-encoder: pooled sentence vectors compared by cosine."""
