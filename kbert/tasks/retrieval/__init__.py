"""Dense retrieval: a dual encoder trained and evaluated on BEIR-format data, with TREC runs."""
