"""Data: toy generators and real-data loaders (IDX files, scikit-learn digits)."""
