"""Package data: the Walk grammar, shipped inside wgc as `wgc._grammar`."""
