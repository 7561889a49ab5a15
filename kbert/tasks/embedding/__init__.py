"""Sentence embeddings from a pre-trained encoder (export-only)."""
