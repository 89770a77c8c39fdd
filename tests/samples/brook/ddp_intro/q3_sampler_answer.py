sampler_answer = "b"
