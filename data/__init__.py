"""Dataset registry, loaders and split protocols (`titans_seq.data`)."""
