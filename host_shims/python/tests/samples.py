"""Sample data the shim tests share."""
import numpy as np

import nvfp4_mla


def tokens(n, seed=0, scale=1.0):
    """n random tokens [n, 576] as bf16 bits (standard normal times `scale`), reproducible by seed."""
    rng = np.random.default_rng(seed)
    return nvfp4_mla.bf16_bits(rng.standard_normal((n, 576)).astype(np.float32) * scale)
