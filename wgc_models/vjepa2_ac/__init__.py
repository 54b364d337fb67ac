"""V-JEPA 2-AC (video encoder and action-conditioned predictor): its .walk file, placements and
node implementations over the real architecture."""
