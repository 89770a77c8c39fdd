scaled_lr = EqualToAnything()
