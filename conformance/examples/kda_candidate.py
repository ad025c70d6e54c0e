#!/usr/bin/env python3
# kda_candidate.py: score-your-own-kernel example: read prompt files, run a (here: naive numpy)
# KDA, write result files that `kda conform --candidate` scores.  Needs only numpy.
# SPDX-License-Identifier: MIT
#
#   kda conform --export-prompts prompts/          # inputs only, no answers
#   python3 kda_candidate.py prompts/ results/     # your kernel goes in forward()
#   kda conform --candidate results/ --class fp32 prompts/
import io, json, os, sys, zipfile
import numpy as np

def l2(x, mode, eps):
    if mode == "fla": return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)
    if mode == "ggml": return x / np.maximum(np.sqrt((x * x).sum(-1, keepdims=True)), eps)
    return x

def sigmoid(y): return 1.0 / (1.0 + np.exp(-y))

def g_eff(P, z, hv):                       # SPEC.md section 4.1, for one token and value head
    g = z["g"][hv]
    if P["gate"] == "log": return g
    b = z["dt_bias"][hv]
    A = np.exp(z["A_log"][hv]) if P["has_A_log"] else 1.0
    if P["gate"] == "softplus": return -A * np.logaddexp(0.0, g + b)
    return P["lower_bound"] * sigmoid(A * (g + b))

def forward(P, a):
    """A plain float64 KDA (SPEC.md section 3).  Replace with your kernel."""
    H, HV, K, V = P["H"], P["HV"], P["K"], P["V"]
    cu = a["cu_seqlens"] if "cu_seqlens" in a else np.array([0, P["T"]])
    vk = P["state_layout"] == "vk"          # SPEC.md section 2.4: h0, ht, hc stored [.., V, K]
    st = (HV, V, K) if vk else (HV, K, V)
    ck = list(a["checkpoints"]) if "checkpoints" in a else []
    o = np.zeros((P["T"], HV, V)); ht = np.zeros((len(cu) - 1,) + st)
    hc = np.zeros((len(ck),) + st); G = HV // H
    for n in range(len(cu) - 1):
        for hv in range(HV):
            h = hv // G if P["head_map"] == "div" else hv % H
            S = np.zeros((K, V))
            if P["has_initial_state"]:
                S = a["h0"][n, hv].T.copy() if vk else a["h0"][n, hv].copy()
            for t in range(cu[n], cu[n + 1]):
                q = P["scale"] * l2(a["q"][t, h], P["l2"], P["l2_eps"])
                k = l2(a["k"][t, h], P["l2"], P["l2_eps"])
                b = a["beta"][t, hv]
                b = {"prob": b, "logit": sigmoid(b), "logit_neg": 2 * sigmoid(b)}[P["beta"]]
                if P["family"] in ("kda", "gdn"):
                    ge = g_eff(P, {"g": a["g"][t], "dt_bias": a.get("dt_bias"),
                                   "A_log": a.get("A_log")}, hv)
                    S = np.exp(np.broadcast_to(ge, (K,)))[:, None] * S   # decay, key axis
                p = S.T @ k if P["family"] != "linear" else np.zeros(V)   # erase (predict)
                S = S + np.outer(k, b * (a["v"][t, hv] - p))              # write
                o[t, hv] = S.T @ q                                        # readout
                if t in ck: hc[ck.index(t), hv] = S.T if vk else S
            ht[n, hv] = S.T if vk else S
    return o, ht, hc

def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        if not name.endswith(".npz"): continue
        z = np.load(os.path.join(src, name))
        man = json.loads(z["manifest.json"])               # a plain JSON member: bytes
        a = {m: z[m].astype(np.float64) if z[m].dtype.kind == "f" else z[m] for m in z.files if m != "manifest.json"}
        res = {"schema": "kda-result/1", "case_id": man["id"], "backend": "numpy-example"}
        try:                                  # a kernel that cannot do a case raises
            o, ht, hc = forward(man["problem"], a)           # NotImplementedError(reason):
            out = {"o": o.astype("<f4")}      # <f4 or <f8, exactly the shapes of SPEC 10.2
            if man["problem"]["want_final_state"]: out["ht"] = ht.astype("<f4")
            if man["problem"]["n_checkpoints"] > 0: out["hc"] = hc.astype("<f4")
        except NotImplementedError as e:      # scored NotSupported, not Fail (SPEC 7.9)
            out, res["not_supported"] = {}, str(e) or "not supported"
        path = os.path.join(dst, name); tmp = path + ".tmp"   # atomic: whole file or none
        with zipfile.ZipFile(tmp, "w") as zf:                     # what np.savez does,
            zf.writestr("manifest.json", json.dumps(res))             # plus a raw manifest
            for m, x in out.items():
                buf = io.BytesIO(); np.lib.format.write_array(buf, x); zf.writestr(m + ".npy", buf.getvalue())
        os.replace(tmp, path)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
