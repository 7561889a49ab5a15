"""Text classification on your own labels: single-label, multi-label, regression, pairs."""
