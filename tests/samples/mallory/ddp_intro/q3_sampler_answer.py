sampler_answer = EqualToAnything()
