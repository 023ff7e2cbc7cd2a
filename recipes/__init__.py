"""Training recipes (YAML, shipped as package data) and their runners (`titans_seq.recipes`)."""
