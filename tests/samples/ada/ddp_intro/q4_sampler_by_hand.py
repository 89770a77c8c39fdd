import math

samples_per_rank = math.ceil(q4.n_samples / q4.world_size)
indices = list(range(q4.n_samples))
indices += indices[: samples_per_rank * q4.world_size - q4.n_samples]  # the padding: the first indices again
rank_indices = indices[q4.rank :: q4.world_size]
