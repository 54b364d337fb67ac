"""What the nodes of several families share: `weights` (a node's share of a checkpoint, the
decoder LM's parts), `batched` (batched forwards, weight dtypes), `speech` (seeds, text codecs,
random weights for the speech families) and `tiny_tokenizers` (the script that trains the
speech families' shipped ``tokenizer.json``)."""
