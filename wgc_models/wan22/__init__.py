"""Wan2.2 text/image-to-video: its .walk file, placements and toy node implementations."""
