#!/usr/bin/env python3
"""Laplace's law for a static droplet of the free-energy model: the pressure jump across the
interface times the radius must be the same (within 5%) for three radii.

usage: lbm_laplace.py HALOX_LBM [halox-lbm arguments...]
"""
import os
import re
import subprocess
import sys

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def main():
    lbm, extra = sys.argv[1], sys.argv[2:]
    products = []
    for radius in (10, 14, 18):
        cmd = [lbm, "--grid", "64x64x64", "--init", "droplet", "--radius", str(radius), "--steps", "6000"] + extra
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
        m = re.search(r"pressure jump ([-0-9.e+]+).*dp \* R = ([-0-9.e+]+)", p.stdout)
        if p.returncode != 0 or not m:
            sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
        dp, product = float(m.group(1)), float(m.group(2))
        products.append(product)
        print(f"radius {radius}: pressure jump {dp:.6e}, dp * R = {product:.6e}")
    mean = sum(products) / len(products)
    spread = max(abs(p - mean) / mean for p in products)
    print(f"dp * R: mean {mean:.6e}, largest deviation {100 * spread:.2f}% (tolerance 5%)")
    if not spread < 0.05:
        sys.exit("FAILED: the pressure jump does not follow Laplace's law within 5%")


if __name__ == "__main__":
    main()
