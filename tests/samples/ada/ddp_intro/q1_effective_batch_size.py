effective_batch_size = q1.batch_per_gpu * q1.world_size
