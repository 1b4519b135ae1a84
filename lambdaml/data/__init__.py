"""Datasets: file formats, synthetic generators, sharding into S3, batch order."""
