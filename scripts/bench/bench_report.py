#!/usr/bin/env python3
"""How `benchctl report` scales: a generated Winoground-layout suite of N items (default
250,000, EqBen's size; every item shows the same two generated images), random scores stored
as an external run (`score --model-name`), then the report written and opened in headless
Chromium. Prints the write time, the page's files and sizes, and the time until the first
page of items is on screen (`data-ready-ms`, from navigation start).

Usage: python3 scripts/bench/bench_report.py [--benchctl target/release/benchctl] [--items 250000]
                                       [--chromium chromium]
"""
import argparse
import json
import os
import random
import re
import subprocess
import tempfile
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--benchctl", default="target/release/benchctl")
    p.add_argument("--items", type=int, default=250_000)
    p.add_argument("--chromium", default="chromium")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="bench-report-")
    data = os.path.join(work, "suite")
    os.makedirs(os.path.join(data, "images"))
    demo = "datasets/demo/winoground/images"
    for k in range(2):
        with open(os.path.join(demo, f"ex_0_img_{k}.png"), "rb") as src, open(os.path.join(data, "images", f"img_{k}.png"), "wb") as dst:
            dst.write(src.read())
    rng = random.Random(0)
    tags = ["Object", "Relation", "Both"]
    with open(os.path.join(data, "examples.jsonl"), "w") as ex, open(os.path.join(work, "scores.jsonl"), "w") as sc:
        for i in range(args.items):
            ex.write(json.dumps({"id": i, "image_0": "img_0", "image_1": "img_1",
                                 "caption_0": f"caption zero of item {i}", "caption_1": f"caption one of item {i}",
                                 "tag": "Adjective-Color", "secondary_tag": "", "num_main_preds": 1,
                                 "collapsed_tag": tags[i % 3]}) + "\n")
            sc.write(json.dumps({"id": str(i), "scores": [[round(rng.random(), 4) for _ in range(2)] for _ in range(2)]}) + "\n")
    results = os.path.join(work, "results")
    out = subprocess.run([args.benchctl, "score", "--suite", "winoground", "--data-dir", data, "--scores",
                          os.path.join(work, "scores.jsonl"), "--model-name", "random-scores", "--results-dir", results],
                         check=True, capture_output=True, text=True).stdout
    run = re.search(r"^stored (.*)$", out, re.M).group(1)
    start = time.perf_counter()
    subprocess.run([args.benchctl, "report", run], check=True, capture_output=True)
    write_s = time.perf_counter() - start
    report = run[: -len(".json")] + ".report"
    sizes = {}
    for root, _, files in os.walk(report):
        for f in files:
            sizes[os.path.relpath(os.path.join(root, f), report)] = os.path.getsize(os.path.join(root, f))
    chunks = [s for f, s in sizes.items() if f.startswith("data/chunk-")]
    print(f"{args.items} items: report written in {write_s:.1f} s; {len(sizes)} files, {sum(sizes.values()) / 1e6:.1f} MB "
          f"in all; index.html {sizes['index.html'] / 1e3:.1f} kB; data/index.js {sizes['data/index.js'] / 1e6:.2f} MB; "
          f"{len(chunks)} chunks of {max(chunks) / 1e3:.0f} kB at most")
    for fragment in ["", "outcome=fail&sort=asc"]:
        start = time.perf_counter()
        dom = subprocess.run([args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                              f"file://{os.path.abspath(report)}/index.html#{fragment}"],
                             check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - start
        ready = re.search(r'data-ready-ms="(\d+)"', dom)
        cards = dom.count('data-item="')
        print(f"page #{fragment or '(default)'}: {cards} items on screen {ready.group(1) if ready else '?'} ms after "
              f"navigation start (chromium's whole run {wall:.1f} s)")


if __name__ == "__main__":
    main()
