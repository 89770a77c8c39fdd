scaled_lr = q6.lr  # keeps the serial learning rate
