checkpoint_rank = EqualToAnything()
