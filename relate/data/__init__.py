"""Dataset code: the synthetic world, its lexicon, and readers for native benchmark formats."""
