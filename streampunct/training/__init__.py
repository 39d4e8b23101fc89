"""Training the models (text, light, pause fusion, POS tagger), tuning their offsets, and their data."""
