"""BAGEL (text and image in, text and image out): its .walk file, placements and node
implementations over the real architecture."""
