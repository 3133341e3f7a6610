#!/usr/bin/env python3
"""Kernel-level peer for shared-block attention (bench/GPU_NOTES.md, "Shared-block attention"):
PyTorch's scaled_dot_product_attention (and flash-attention through torch when the flash_attn
package is importable) on the shapes bench_gpu --shared-kv times for our attention op
("attn_shared_kernel" rows): N decode queries (one per request) x n_heads query heads
attending one shared document of D keys (n_kv_heads KV heads, GQA) plus each request's own
64-key tail, head_dim 128, bf16, one layer.

Rows per N (median of --reps after warm-ups, CUDA events):
  shared_stage    the N queries as one sequence against the shared keys once (what a cascade's
                  first stage does: FlashInfer's MultiLevelCascadeAttentionWrapper level 0)
  own_stage       each request's query against its own 64 keys (batched)
  cascade         both stages with their log-sum-exp and the merge (the whole attention, the
                  number to set beside ours): torch's efficient-attention kernel, which returns
                  the log-sum-exp; absent where this torch lacks it
  per_request     every request reading its own copy of shared + own keys (no sharing: the
                  paged layout's bytes), N up to --per-request-max (the copies are materialised)
FlashInfer is not installed on the device and cannot be fetched there (no network), so its
cascade API is not measured; this says so in the output.

  python3 bench/attn_peer.py [--points 1,64,256,1000] [--doc-tokens 7000] [--own-tokens 64]
                             [--heads 32] [--kv-heads 8] [--head-dim 128] [--reps 20] [--out FILE]
Prints a table on stderr and JSON on stdout (or --out).
"""
import argparse
import json
import math
import platform
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="1,64,256,1000")
    ap.add_argument("--doc-tokens", type=int, default=7000)
    ap.add_argument("--own-tokens", type=int, default=64)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--per-request-max", type=int, default=256)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"attn_peer: torch is not importable: {e}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("attn_peer: no CUDA device for torch", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    dt = torch.bfloat16
    H, HKV, HD, D, T = args.heads, args.kv_heads, args.head_dim, args.doc_tokens, args.own_tokens
    G = H // HKV
    scale = 1.0 / math.sqrt(HD)
    try:
        import flash_attn  # noqa: F401
        flash_attn_ok = True
    except ImportError:
        flash_attn_ok = False
    try:
        import flashinfer  # noqa: F401
        flashinfer_ok = True
    except ImportError:
        flashinfer_ok = False

    def timed(fn, reps):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)  # us
        return statistics.median(ts)

    def expand_kv(x):  # [B, HKV, L, HD] -> [B, H, L, HD] (GQA: query head h reads KV head h // G)
        return x.repeat_interleave(G, dim=1)

    gen = torch.Generator(device=dev).manual_seed(7)
    k_doc = torch.randn(1, HKV, D, HD, device=dev, dtype=dt, generator=gen)
    v_doc = torch.randn(1, HKV, D, HD, device=dev, dtype=dt, generator=gen)
    k_doc_h, v_doc_h = expand_kv(k_doc), expand_kv(v_doc)
    rows = []
    notes = []
    if not flashinfer_ok:
        notes.append("flashinfer not importable on this machine (no wheel, no network): its cascade API not measured")
    for n in [int(x) for x in args.points.split(",") if x]:
        q = torch.randn(n, H, 1, HD, device=dev, dtype=dt, generator=gen)
        k_own = torch.randn(n, HKV, T, HD, device=dev, dtype=dt, generator=gen)
        v_own = torch.randn(n, HKV, T, HD, device=dev, dtype=dt, generator=gen)
        k_own_h, v_own_h = expand_kv(k_own), expand_kv(v_own)
        q_shared = q.reshape(n, H, HD).transpose(0, 1).unsqueeze(0).contiguous()  # [1, H, n, HD]
        row = {"queries": n, "shared_keys": D, "own_keys": T, "n_heads": H, "n_kv_heads": HKV, "head_dim": HD}
        kv_bytes_once = (D + n * T) * HKV * HD * 2 * 2
        row["kv_bytes"] = kv_bytes_once
        flops = 4.0 * n * H * HD * (D + T)
        row["flops"] = flops

        def shared_stage():
            return F.scaled_dot_product_attention(q_shared, k_doc_h, v_doc_h, scale=scale)

        def own_stage():
            return F.scaled_dot_product_attention(q, k_own_h, v_own_h, scale=scale)

        row["shared_stage_us"] = timed(shared_stage, args.reps)
        row["own_stage_us"] = timed(own_stage, args.reps)
        # the cascade: both stages with their log-sum-exp, merged (FlashInfer's merge_state rule)
        eff = getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", None)
        if eff is not None:
            def cascade():
                # out [B, H, L, HD]; log-sum-exp [B, H, L rounded up to 32], natural log, f32
                o1, lse1 = eff(q_shared, k_doc_h, v_doc_h, None, True, scale=scale)[:2]
                o2, lse2 = eff(q, k_own_h, v_own_h, None, True, scale=scale)[:2]
                o1 = o1[0].transpose(0, 1).float()     # [n, H, HD]
                l1 = lse1[0, :, :n].transpose(0, 1)    # [n, H]
                o2 = o2[:, :, 0].float()               # [n, H, HD]
                l2 = lse2[:, :, 0]                     # [n, H]
                m = torch.maximum(l1, l2)
                w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
                return (o1 * w1[..., None] + o2 * w2[..., None]) / (w1 + w2)[..., None]

            try:
                ref = F.scaled_dot_product_attention(
                    q, torch.cat([k_doc_h.expand(n, -1, -1, -1), k_own_h], 2),
                    torch.cat([v_doc_h.expand(n, -1, -1, -1), v_own_h], 2), scale=scale).squeeze(2).float() \
                    if n <= 64 else None
                got = cascade()
                if ref is not None:
                    row["cascade_max_err"] = float((got - ref).abs().max())
                row["cascade_us"] = timed(cascade, args.reps)
            except Exception as e:  # an older torch's signature
                notes.append(f"cascade at N={n}: {type(e).__name__}: {e}")
        if n <= args.per_request_max:
            try:
                kp = torch.cat([k_doc_h.expand(n, -1, -1, -1), k_own_h], 2).contiguous()
                vp = torch.cat([v_doc_h.expand(n, -1, -1, -1), v_own_h], 2).contiguous()

                def per_request():
                    return F.scaled_dot_product_attention(q, kp, vp, scale=scale)

                row["per_request_us"] = timed(per_request, args.reps)
                row["per_request_kv_bytes"] = n * (D + T) * HKV * HD * 2 * 2
                del kp, vp
            except torch.cuda.OutOfMemoryError:
                notes.append(f"per_request at N={n}: out of memory")
        if flash_attn_ok:
            try:
                from flash_attn import flash_attn_func
                qf = q_shared.transpose(1, 2).contiguous()  # [1, n, H, HD]
                kf, vf = k_doc.transpose(1, 2).contiguous(), v_doc.transpose(1, 2).contiguous()
                row["flash_attn_shared_stage_us"] = timed(lambda: flash_attn_func(qf, kf, vf, softmax_scale=scale), args.reps)
            except Exception as e:
                notes.append(f"flash_attn at N={n}: {type(e).__name__}: {e}")
        best = row.get("cascade_us")
        if best:
            row["cascade_gb_s"] = kv_bytes_once / (best * 1e-6) / 1e9
            row["cascade_tflop_s"] = flops / (best * 1e-6) / 1e12
        rows.append(row)
        print(f"  peer N {n:5d}: shared stage {row['shared_stage_us']:9.1f} us  own {row['own_stage_us']:8.1f} us  "
              f"cascade {row.get('cascade_us', float('nan')):9.1f} us  per-request {row.get('per_request_us', float('nan')):9.1f} us",
              file=sys.stderr)
        del q, k_own, v_own, k_own_h, v_own_h, q_shared
        torch.cuda.empty_cache()
    out = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                    "cuda": torch.version.cuda, "python": platform.python_version(),
                    "flash_attn": flash_attn_ok, "flashinfer": flashinfer_ok},
        "what": "one layer's attention, bf16, N decode queries sharing one document plus a 64-key own tail each; "
                "times in microseconds (CUDA events, median)",
        "rows": rows,
        "notes": notes,
    }
    text = json.dumps(out, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
