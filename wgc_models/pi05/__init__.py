"""π0.5 (a vision-language-action policy): its .walk file, placements and node implementations
over the real architecture."""
