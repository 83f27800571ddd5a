"""Cross-checks areal-train's safetensors files against the reference implementation.

    safetensors_interop.py DIR

Loads DIR/cpp.safetensors (written by areal-train) with the `safetensors` package and
checks every tensor against the pattern below; then writes DIR/py.safetensors with the
same tensors for the C++ side to read. The pattern is computed the same way in
tests/test_safetensors.cpp, so neither side trusts the other's numbers.
"""
import sys

import torch
from safetensors.torch import load_file, save_file

DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
}
SHAPE = (3, 5, 7)


def pattern(dtype):
    i = torch.arange(3 * 5 * 7, dtype=torch.int64)
    v = (i * 37) % 101 - 50
    if dtype.is_floating_point:
        return (v.double() * 0.125).to(dtype).reshape(SHAPE)
    if dtype == torch.uint8:
        v = v + 50
    return v.to(dtype).reshape(SHAPE)


def main(directory):
    expected = {name: pattern(dtype) for name, dtype in DTYPES.items()}
    loaded = load_file(f"{directory}/cpp.safetensors")
    assert sorted(loaded) == sorted(expected), f"names differ: {sorted(loaded)}"
    for name, want in expected.items():
        got = loaded[name]
        assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got.dtype} {got.shape}"
        assert torch.equal(got, want), f"{name}: values differ"
    save_file(expected, f"{directory}/py.safetensors", metadata={"format": "pt"})
    print(f"interop ok: {len(expected)} tensors checked and written")


if __name__ == "__main__":
    main(sys.argv[1])
