"""Named-entity recognition (CoNLL-2003): a tag per word."""
