"""Wan2.2 text/image-to-video: its .walk file, placements and nodes, and the architecture as
diffusers runs it: `transformer`, `scheduler` (flow UniPC), `vae` / `vae_encoder`, `text` (umT5);
`tiny` builds the seeded tiny parts, `toy` the noise both paths draw."""
