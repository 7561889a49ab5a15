"""Cross-encoder re-ranking: `[CLS] query [SEP] document [SEP]` -> one relevance score."""
