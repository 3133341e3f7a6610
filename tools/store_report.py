#!/usr/bin/env python3
"""Summary and chart of one `scripts/device_store.sh` run (issues 29 and 22).

    python3 tools/store_report.py bench/results/store_h200_e5dc308

Reads the `lazyattn bench` / `lazyattn ingest` JSON files the run left in DIR (store_*,
restart_*, shared_*, ingest.json, dd.txt), prints one table, and writes DIR/summary.json and
DIR/ttft.png (a gnuplot bar chart of TTFT p50 per configuration; skipped without gnuplot).
Ratios are computed from the JSON, measured side by side in the run; nothing is typed in.
"""
import json
import os
import re
import shutil
import subprocess
import sys

ROWS = [  # file, label
    ("store_allcached", "all cached (200 docs)"),
    ("store_nostore", "1600 docs, no store"),
    ("store_host", "1600 docs, host tier"),
    ("store_host_disk", "2000 docs, host + disk"),
    ("restart_before", "restart: before"),
    ("restart_after", "restart: after (disk)"),
    ("restart_recompute", "restart: recompute"),
    ("shared_writer", "shared: replica A"),
    ("shared_reader", "shared: replica B (Redis)"),
]


def load(d, name):
    p = os.path.join(d, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None


def row(j):
    m = j["methods"][0]
    st = m.get("store") or {}
    tiers = st.get("tiers", {})
    by = m.get("doc_hit_ratio_by_tier") or {}
    return {
        "method": m["method"],
        "ttft_p50_ms": m["ttft_ms"]["p50"],
        "ttft_p99_ms": m["ttft_ms"]["p99"],
        "doc_hit_ratio": m.get("doc_hit_ratio"),
        "hit_by_tier": by,
        "documents_computed": st.get("documents_computed"),
        "documents_loaded": st.get("documents_loaded"),
        "read_gb_per_s": {t: v.get("read_gb_per_s") for t, v in tiers.items() if v.get("enabled")},
        "lookups_dropped": st.get("lookups_dropped"),
        "commit": j.get("machine", {}).get("commit"),
    }


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    out = {"dir": d, "rows": {}}
    for name, label in ROWS:
        j = load(d, name)
        if j:
            out["rows"][name] = dict(row(j), label=label)
    r = out["rows"]
    ratio = {}
    if "store_allcached" in r:
        base = r["store_allcached"]["ttft_p50_ms"]
        for k in ("store_nostore", "store_host", "store_host_disk"):
            if k in r:
                ratio[k + "_vs_allcached"] = r[k]["ttft_p50_ms"] / base
    if "restart_after" in r and "restart_recompute" in r:
        ratio["restart_after_vs_recompute"] = r["restart_after"]["ttft_p50_ms"] / r["restart_recompute"]["ttft_p50_ms"]
    if "shared_reader" in r and "restart_recompute" in r:
        ratio["shared_reader_vs_recompute"] = r["shared_reader"]["ttft_p50_ms"] / r["restart_recompute"]["ttft_p50_ms"]
    out["ratios"] = ratio
    ing = load(d, "ingest")
    if ing:
        out["ingest"] = ing["summary"]
    dd = os.path.join(d, "dd.txt")
    if os.path.exists(dd):
        m = re.search(r"([\d.]+) ([GM])B/s", open(dd).read())
        if m:
            out["dd_write_gb_per_s"] = float(m.group(1)) / (1 if m.group(2) == "G" else 1000)
    print(f"{'configuration':28s} {'TTFT p50':>9s} {'p99':>9s} {'doc hit':>8s}  by tier (pool/host/disk/shared)  computed")
    for name, v in r.items():
        by = v["hit_by_tier"]
        tiers = "/".join(f"{100 * by.get(t, 0):.1f}" for t in ("pool", "host", "disk", "shared")) if by else "-"
        hit = f"{100 * v['doc_hit_ratio']:.1f}%" if v["doc_hit_ratio"] is not None else "-"
        print(f"{v['label']:28s} {v['ttft_p50_ms']:9.2f} {v['ttft_p99_ms']:9.2f} {hit:>8s}  {tiers:31s}  "
              f"{v['documents_computed'] if v['documents_computed'] is not None else '-'}")
    for k, v in ratio.items():
        print(f"{k}: {v:.2f}x")
    if ing:
        g = ing["summary"]
        print(f"ingest: {g['documents_per_s']:.1f} documents/s, {g['tokens_per_s']:.0f} tokens/s, "
              f"{g['gb_per_s']:.2f} GB/s end to end ({g['disk_write_gb_per_s']:.2f} GB/s the writes alone); "
              f"dd: {out.get('dd_write_gb_per_s', float('nan')):.2f} GB/s")
    json.dump(out, open(os.path.join(d, "summary.json"), "w"), indent=1)
    if shutil.which("gnuplot") and r:
        dat = os.path.join(d, ".ttft.dat")
        with open(dat, "w") as f:
            for v in r.values():
                f.write(f"\"{v['label']}\" {v['ttft_p50_ms']:.3f}\n")
        png = os.path.join(d, "ttft.png")
        script = (f"set terminal png size 1000,500; set output '{png}'; set style fill solid 0.6; "
                  "set boxwidth 0.7; set ylabel 'TTFT p50 (ms)'; set logscale y; set xtics rotate by -30 font ',9'; "
                  "set title 'Document KV store on the H200 (Llama-3-8B shape, 10 docs x 780 tokens a request)'; "
                  f"plot '{dat}' using 0:2:xtic(1) with boxes notitle, '' using 0:2:(sprintf('%.0f', $2)) "
                  "with labels offset 0,0.8 notitle")
        subprocess.run(["gnuplot", "-e", script], check=True)
        os.remove(dat)
        print("wrote", png)
    print("wrote", os.path.join(d, "summary.json"))


if __name__ == "__main__":
    main()
