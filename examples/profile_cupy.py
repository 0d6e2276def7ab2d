"""profile(fn) on a CuPy elementwise kernel and a reduction.

    python examples/profile_cupy.py
"""
import nsightwrap


def saxpy_and_sum(n: int):
    import cupy as cp

    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    z = 2.0 * x + y
    return float(z.sum())


if __name__ == "__main__":
    result = nsightwrap.profile(saxpy_and_sum, 1 << 24, set="basic")
    print(result.summary())
    print(result.df[["function", "gpu__time_duration.sum"]])
