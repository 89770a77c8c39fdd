scaled_lr = q6.world_size * q6.lr
