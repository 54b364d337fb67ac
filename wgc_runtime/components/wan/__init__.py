"""Wan2.2 as diffusers runs it, named as its diffusers folders: the umT5 text encoder
(`text`), the diffusion transformer (`transformer`), the flow UniPC sampler (`scheduler`) and
the video VAE's decoder (`vae`)."""
