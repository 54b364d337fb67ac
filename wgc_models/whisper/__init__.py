"""Whisper speech recognition: its .walk file, placements and node implementations over the
real architecture."""
