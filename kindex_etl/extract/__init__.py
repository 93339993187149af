"""Extract: find upstream CSV objects and stream their rows as Arrow record batches."""
