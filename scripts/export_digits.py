#!/usr/bin/env python3
"""Export scikit-learn's 8x8 handwritten digits (UCI "Optical Recognition of Handwritten
Digits", test part, 1,797 samples) to data/digits/digits.bin, the file sparsegate embeds.

Format: 1,797 records of 65 bytes, in scikit-learn's order: 64 pixel counts (0..16, row-major
8x8) then the label (0..9). Re-running reproduces the committed file byte for byte (the
sha256 is printed and recorded in data/digits/README.md).

    pip install scikit-learn && python3 scripts/export_digits.py
"""
import hashlib
import pathlib

import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
pixels = digits.data.astype(np.uint8)
assert pixels.shape == (1797, 64) and pixels.max() <= 16
labels = digits.target.astype(np.uint8).reshape(-1, 1)
records = np.hstack([pixels, labels])
out = pathlib.Path(__file__).resolve().parent.parent / "data" / "digits" / "digits.bin"
out.write_bytes(records.tobytes())
print(out, len(records), "records, sha256", hashlib.sha256(out.read_bytes()).hexdigest())
