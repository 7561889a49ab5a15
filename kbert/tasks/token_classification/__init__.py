"""Token classification: a tag per word, any tag set (`--task=token_classification`), and NER on
CoNLL-2003 (`--task=ner`), one implementation."""
