"""Clients of the streampunct server: mic, file, words (each also ``streampunct <name>``)."""
