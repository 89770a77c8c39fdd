effective_batch_size = q1.world_size * q1.batch_per_gpu * 1.0  # a float
