"""Load: write Parquet and JSON to staging, commit, publish."""
