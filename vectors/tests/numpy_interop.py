#!/usr/bin/env python3
# numpy_interop.py: checks with numpy that archives written by our C writer are read exactly.
# SPDX-License-Identifier: MIT
#
#   numpy_interop.py c-writer DIR   DIR/c_writer.npz and DIR/c_empty.npz, written by check_npz
#                                   (KDA_INTEROP_DIR=DIR); exact dtypes, shapes and bits
#   numpy_interop.py case FILE      a case file from `kda gen "seed=1 T=8 H=1 HV=2 K=4 V=4"`
#
# Both also check the zip layout of SPEC.md §10.1 (stored, manifest.json first, 1980-01-01
# 00:00:00, Unix 0644, no extra fields, no data descriptors, CRCs good) and that every .npy
# member is byte-for-byte what numpy.save writes for the same array.  Exits non-zero with a
# message on the first failure.
import io
import json
import struct
import sys
import zipfile

import numpy as np


def fail(msg):
    print("check-numpy: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def check_layout(path):
    """The deterministic zip layout of SPEC.md §10.1; returns the member names."""
    raw = open(path, "rb").read()
    with zipfile.ZipFile(path) as z:
        check(z.testzip() is None, f"{path}: a member has a bad CRC")
        infos = z.infolist()
        for zi in infos:
            where = f"{path}: member {zi.filename}"
            check(zi.compress_type == zipfile.ZIP_STORED, where + ": not stored")
            check(zi.date_time == (1980, 1, 1, 0, 0, 0), where + f": time {zi.date_time}")
            check(zi.create_system == 3, where + ": not made by Unix")
            mode = zi.external_attr >> 16
            check(mode == 0o100644, where + f": mode {oct(mode)}")
            check(zi.extra == b"", where + ": central extra field present")
            check(zi.flag_bits == 0, where + f": flag bits {zi.flag_bits:#x}")
            sig, _, flags, method, _, _, _, _, _, nlen, elen = struct.unpack(
                "<IHHHHHIIIHH", raw[zi.header_offset:zi.header_offset + 30])
            check(sig == 0x04034B50 and flags == 0 and method == 0 and elen == 0,
                  where + ": local header has flags, compression or an extra field")
            if zi.filename.endswith(".npy"):
                arr = np.load(io.BytesIO(z.read(zi)), allow_pickle=False)
                ref = io.BytesIO()
                np.save(ref, arr)
                check(ref.getvalue() == z.read(zi), where + ": differs from numpy.save's bytes")
        names = [zi.filename for zi in infos]
    if names:
        check(names[0] == "manifest.json", f"{path}: first member is {names[0]}")
    return names


def load_manifest(npz, path):
    try:
        m = json.loads(npz["manifest.json"].decode("utf-8"))
    except (KeyError, ValueError) as e:
        fail(f"{path}: manifest.json does not parse as JSON: {e}")
    check(isinstance(m, dict), f"{path}: manifest.json is not an object")
    return m


def same(path, name, got, want):
    check(got.dtype.str == want.dtype.str,
          f"{path}: {name}: dtype {got.dtype.str}, want {want.dtype.str}")
    check(got.shape == want.shape, f"{path}: {name}: shape {got.shape}, want {want.shape}")
    check(got.tobytes() == want.tobytes(),
          f"{path}: {name}: values differ:\n{got!r}\nwant\n{want!r}")


def base(i):
    return ((37 * i) % 101 - 50) / 8


def expected_c_writer():
    """Keep in step with write_interop() in check_npz.c."""
    f8 = np.array([base(i) + 1.0 / 3 for i in range(6)], dtype="<f8")
    f8[1], f8[2], f8[5] = 0.1, -0.0, 1e-310
    f2 = np.array([base(i) + 1.0 / 3 for i in range(6)], dtype="<f8")
    f2[5] = 1 + 2.0**-11 + 2.0**-40
    i8 = np.array([i * 1000000007 - 2**40 for i in range(5)], dtype="<i8")
    i8[0], i8[4] = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    i4 = np.array([7 - 3 * i for i in range(4)], dtype="<i4")
    i4[0] = np.iinfo(np.int32).min
    return {
        "f8": f8.reshape(2, 3),
        # numpy converts float64 to float32/float16 with one round-to-nearest-even, like ours.
        "f4": np.array([base(i) + 1.0 / 3 for i in range(4)], dtype="<f8").astype("<f4"),
        "f2": f2.astype("<f2").reshape(3, 2),
        "i8": i8,
        "i4": i4.reshape(2, 2),
        "scalar": np.array(2.5, dtype="<f8"),
        "empty": np.zeros((0, 4), dtype="<f4"),
        "r4": np.array([base(i) for i in range(12)], dtype="<f8").reshape(2, 1, 3, 2),
    }


def check_c_writer(d):
    path = d + "/c_writer.npz"
    names = check_layout(path)
    want = expected_c_writer()
    check(names == ["manifest.json"] + [k + ".npy" for k in want], f"{path}: members {names}")
    with np.load(path, allow_pickle=False) as npz:
        m = load_manifest(npz, path)
        check(m == {"generator": "check_npz", "version": 1}, f"{path}: manifest {m}")
        for k, v in want.items():
            same(path, k, npz[k], v)
        check(float(npz["f2"].reshape(-1)[5]) == 1 + 2.0**-10, f"{path}: f2[5] double-rounded")
    path = d + "/c_empty.npz"
    check(check_layout(path) == [], f"{path}: not empty")
    with np.load(path, allow_pickle=False) as npz:
        check(list(npz.keys()) == [], f"{path}: has members")
    return len(want)


def check_case(path):
    """A case file from kda gen "seed=1 T=8 H=1 HV=2 K=4 V=4" (SPEC.md §10.2)."""
    names = check_layout(path)
    shapes = {"q": (8, 1, 4), "k": (8, 1, 4), "v": (8, 2, 4), "g": (8, 2, 4), "beta": (8, 2),
              "cu_seqlens": (2,)}
    with np.load(path, allow_pickle=False) as npz:
        m = load_manifest(npz, path)
        check(m.get("schema") == "kda-case/1", f"{path}: schema {m.get('schema')}")
        arrays = [n[:-4] for n in names if n.endswith(".npy")]
        for k, shape in shapes.items():
            check(k in arrays, f"{path}: member {k} missing (has {arrays})")
            a = npz[k]
            check(a.shape == shape, f"{path}: {k}: shape {a.shape}, want {shape}")
            if k == "cu_seqlens":
                check(a.dtype.str in ("<i8", "<i4"), f"{path}: {k}: dtype {a.dtype.str}")
                check(a.tolist() == [0, 8], f"{path}: cu_seqlens {a.tolist()}")
            else:
                check(a.dtype.str in ("<f8", "<f4", "<f2"), f"{path}: {k}: dtype {a.dtype.str}")
                check(bool(np.isfinite(a).all()), f"{path}: {k}: not finite")
        if m.get("input_precision") == "bf16":
            for k in ("q", "k", "v", "g", "beta"):
                a = npz[k]
                check(a.dtype.str == "<f4" and not (a.view("<u4") & 0xFFFF).any(),
                      f"{path}: {k}: not exact in bfloat16")
        if isinstance(m.get("members"), dict):
            check(list(m["members"]) == arrays, f"{path}: manifest members {list(m['members'])} "
                  f"differ from the archive's {arrays}")
    return len(arrays)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("c-writer", "case"):
        print(__doc__ or "usage: numpy_interop.py c-writer DIR | case FILE", file=sys.stderr)
        sys.exit(2)
    n = check_c_writer(sys.argv[2]) if sys.argv[1] == "c-writer" else check_case(sys.argv[2])
    print(f"check-numpy: ok: {sys.argv[1]} {sys.argv[2]} ({n} arrays, numpy {np.__version__})")


if __name__ == "__main__":
    main()
