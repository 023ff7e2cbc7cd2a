"""Domain heads and user-facing estimators (`titans_seq.domains`): forecasting, genomics, lm."""
