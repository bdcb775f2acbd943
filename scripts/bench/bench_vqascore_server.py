"""benchctl's VQAScore through a server beside a plain load generator, against the same server.

Starts llama-cpp-python's OpenAI-compatible server on the tiny Gemma 3 GGUF of the fixtures
(`scripts/fixtures/gen_vqascore_fixture.py`), writes a Winoground-layout suite of N items over the
fixture's 56 px images (every caption distinct, so every pair is asked), then measures, one
after the other on the same server:

- the load generator: the exact requests benchctl sends (question, image data URI,
  `max_tokens: 1`, `logprobs`, `top_logprobs: 2`), `--in-flight` at a time from a thread
  pool, answers parsed; requests per second;
- `benchctl eval --endpoint … --max-in-flight N` on the suite, cold cache: pairs per second
  over its scoring time (`score_s`).

Run: python3 scripts/bench/bench_vqascore_server.py --benchctl target/release/benchctl
"""
import argparse, base64, concurrent.futures, json, random, shutil, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "crates/benchctl-models/tests/fixtures/gemma3-tiny"
IMAGES = ROOT / "crates/benchctl/tests/fixtures/vqa-winoground/images"
QUESTION = 'Does this figure show "{}"? Please answer Yes or No.'
WORDS = "red blue green dog cat left right of a the on under tall small tree car house".split()


def start_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL / "gemma3-tiny-f32.gguf"),
                             "--clip_model_path", str(MODEL / "mmproj-gemma3-tiny-f32.gguf"), "--chat_format",
                             "llava-1-5", "--logits_all", "true", "--n_ctx", "512", "--host", "127.0.0.1", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return proc, port
        except Exception:
            time.sleep(0.25)
    proc.terminate()
    raise SystemExit("the server did not start")


def write_suite(dir: Path, items: int):
    (dir / "images").mkdir(parents=True)
    names = sorted(p.stem for p in IMAGES.glob("*.png"))
    for n in names:
        shutil.copy(IMAGES / f"{n}.png", dir / "images" / f"{n}.png")
    rng = random.Random(0)
    rows, pairs = [], []
    for i in range(items):
        caps = [" ".join(rng.choice(WORDS) for _ in range(8)) + f" {i}-{c}" for c in range(2)]
        imgs = [names[(2 * i) % len(names)], names[(2 * i + 1) % len(names)]]
        rows.append({"id": i, "image_0": imgs[0], "image_1": imgs[1], "caption_0": caps[0], "caption_1": caps[1],
                     "tag": "Object", "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": "Object"})
        pairs += [(im, c) for im in imgs for c in caps]
    (dir / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pairs


def load_generator(port, pairs, in_flight):
    uris = {p.stem: "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() for p in IMAGES.glob("*.png")}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"

    def ask(pair):
        image, caption = pair
        body = {"model": "gemma3-tiny", "max_tokens": 1, "logprobs": True, "top_logprobs": 2,
                "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION.format(caption)},
                                                          {"type": "image_url", "image_url": {"url": uris[image]}}]}]}
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(req, timeout=60))
        return answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(ask, pairs))
    return len(pairs) / (time.perf_counter() - started)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchctl", required=True)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    proc, port = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            pairs = write_suite(tmp / "suite", args.items)
            # Distinct pairs per round: the load generator has no cache, benchctl's is fresh.
            for r in range(args.rounds):
                generator = load_generator(port, pairs, args.in_flight)
                out = subprocess.run([args.benchctl, "eval", "--endpoint", f"http://127.0.0.1:{port}/v1",
                                      "--served-model", "gemma3-tiny", "--suite", "winoground", "--data-dir",
                                      str(tmp / "suite"), "--results-dir", str(tmp / f"results{r}"),
                                      "--max-in-flight", str(args.in_flight)],
                                     capture_output=True, text=True, env={"BENCHCTL_CACHE": str(tmp / f"cache{r}"),
                                                                          "PATH": "/usr/bin:/bin"})
                if out.returncode != 0:
                    raise SystemExit(out.stderr)
                stored = next(l[len("stored "):] for l in out.stdout.splitlines() if l.startswith("stored "))
                run = json.loads(Path(stored.strip()).read_text())
                benchctl = run["counts"]["pairs_scored"] / run["timings"]["score_s"]
                print(f"round {r}: {len(pairs)} pairs, {args.in_flight} in flight: load generator "
                      f"{generator:.1f} req/s, benchctl {benchctl:.1f} pairs/s = {benchctl / generator:.3f}x")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
