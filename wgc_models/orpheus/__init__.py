"""Orpheus text-to-speech (a Llama LM and the SNAC 24 kHz decoder): its .walk file, placements
and node implementations over the real architecture."""
