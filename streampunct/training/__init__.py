"""Training the models (text, pause fusion, POS tagger), tuning their offsets, and their data."""
