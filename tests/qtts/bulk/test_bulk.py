"""`qtts-cli batch` and qtts.bulk: every item's file equals Model.synthesize with its settings,
bad manifest lines are reported by number, and a killed run resumes without synthesizing an
item twice (docs/bulk.md, "How it runs"). The Ray runner: tests/qtts/bulk/test_bulk_ray.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf

import qtts
from qtts.bulk.manifest import parse_item, read_manifest
from tests.fixtures.bulk import (
    CV_BAD_LINES,
    CV_ITEMS,
    base_items,
    batch_cli,
    expected_files,
    files_of,
    good,
    results,
    write_manifest,
)
from tests.fixtures.unicode import INVALID, VALID


@pytest.fixture(scope="module")
def cv_path(gguf_dir: Path) -> Path:
    return gguf_dir / "tiny_custom_voice-f32.gguf"


@pytest.fixture(scope="module")
def base_path(gguf_dir: Path) -> Path:
    return gguf_dir / "tiny_base-f32.gguf"


@pytest.fixture(scope="module")
def cv_case(cv_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The CustomVoice manifest, its expected files and one local run of it."""
    root = tmp_path_factory.mktemp("cv")
    manifest = write_manifest(root / "items.jsonl", CV_ITEMS)
    model = qtts.Model(cv_path, n_threads=2)
    expected = expected_files(model, good(CV_ITEMS), root, root / "expected")
    run = batch_cli(manifest, "-m", cv_path, "--output-dir", root / "out", "-t", "2", "--max-batch", "3", "--json",
                    cache=root / "cache")
    return dict(root=root, manifest=manifest, expected=expected, run=run, out=root / "out")


def test_outputs_equal_synthesize(cv_case: dict[str, Any]) -> None:
    run = cv_case["run"]
    assert run.returncode == 1, run.stderr  # the bad lines make the run incomplete
    for line, why in CV_BAD_LINES.items():
        assert f"items.jsonl: line {line}: {why}" in run.stderr
    assert "Traceback" not in run.stderr
    summary = json.loads(run.stdout)
    assert (summary["done"], summary["failed"], summary["bad_lines"]) == (7, 0, 2)
    assert files_of(cv_case["out"]) == cv_case["expected"]
    recs = {r["id"]: r for r in results(cv_case["out"])}
    assert set(recs) == set(cv_case["expected"])
    for r in recs.values():
        assert r["error"] is None and r["file"] == f"{r['id']}.wav"
        assert sf.info(str(cv_case["out"] / r["file"])).frames == r["samples"] == round(r["seconds"] * 24000)
        assert r["frames"] > 0 and r["stop_reason"] in ("eos", "max_new_tokens") and "total_ms" in r["timings"]


def test_rerun_skips_done(cv_case: dict[str, Any]) -> None:
    before = (cv_case["out"] / "results.jsonl").read_text()
    run = batch_cli(cv_case["manifest"], "-m", "missing.gguf", "--output-dir", cv_case["out"], "--json",
                    cache=cv_case["root"] / "cache")
    assert run.returncode == 1 and "missing.gguf: no such model file" in run.stderr
    run = batch_cli(cv_case["manifest"], "-m", cv_case["root"] / ".." / "x.gguf", "--output-dir", cv_case["out"],
                    "--strict", cache=cv_case["root"] / "cache")
    assert run.returncode == 1 and "nothing synthesized (--strict)" in run.stderr
    assert (cv_case["out"] / "results.jsonl").read_text() == before


def test_strict_fails_before_synthesis(cv_case: dict[str, Any], cv_path: Path) -> None:
    out = cv_case["root"] / "strict"
    run = batch_cli(cv_case["manifest"], "-m", cv_path, "--output-dir", out, "--strict", cache=cv_case["root"])
    assert run.returncode == 1 and "2 bad line(s); nothing synthesized (--strict)" in run.stderr
    assert "line 3: bad JSON" in run.stderr and not out.exists()


BLOCK_RAY = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
import qtts, qtts.bulk, qtts.ray, qtts.cli.batch
from qtts.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_imports_without_ray(cv_case: dict[str, Any], cv_path: Path) -> None:
    out = cv_case["root"] / "noray"
    run = subprocess.run([sys.executable, "-c", BLOCK_RAY, "batch", str(cv_case["manifest"]), "-m", str(cv_path),
                          "--output-dir", str(out), "--ray"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "--ray needs Ray Data: pip install 'qtts[ray]'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not (out / "results.jsonl").exists()


@pytest.mark.parametrize("flags", [[], ["--jobs", "2"]])
def test_bad_model_is_one_clear_error(cv_case: dict[str, Any], cv_path: Path, flags: list[str]) -> None:
    bad = cv_case["root"] / "truncated.gguf"
    bad.write_bytes(cv_path.read_bytes()[:1000])
    run = batch_cli(cv_case["manifest"], "-m", bad, "--output-dir", cv_case["root"] / "bad", *flags,
                    cache=cv_case["root"])
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[-1].startswith(f"qtts-cli: error: {bad}: corrupt or truncated GGUF")


def test_jobs_give_identical_files(cv_case: dict[str, Any], cv_path: Path) -> None:
    out = cv_case["root"] / "jobs"
    run = batch_cli(cv_case["manifest"], "-m", cv_path, "--output-dir", out, "--jobs", "2", "-t", "2",
                    "--max-batch", "2", "--json", cache=cv_case["root"] / "cache")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert files_of(out) == cv_case["expected"]
    workers = json.loads(run.stdout)["workers"]
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
    assert all(0 < w["anonymous_mb"] <= w["pss_mb"] <= w["rss_mb"] for w in workers)


def test_flac_and_plain_text(cv_path: Path, tmp_path: Path) -> None:
    lines = ["First line of plain text.", "", "Third line, after a blank one."]
    manifest = tmp_path / "lines.txt"
    manifest.write_text("\n".join(lines) + "\n")
    run = batch_cli(manifest, "-m", cv_path, "--output-dir", tmp_path / "out", "--format", "flac", "--speaker",
                    "ryan", "-s", "5", "--max-new-tokens", "10", "-q", cache=tmp_path)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    items = [{"id": "1", "text": lines[0], "speaker": "ryan", "seed": 5, "max_new_tokens": 10},
             {"id": "3", "text": lines[2], "speaker": "ryan", "seed": 5, "max_new_tokens": 10}]
    expected = expected_files(qtts.Model(cv_path, n_threads=2), items, tmp_path, tmp_path / "expected", "flac")
    assert files_of(tmp_path / "out", "flac") == expected


def test_unicode_corpus(cv_path: Path, tmp_path: Path) -> None:
    """The corpus of tests/fixtures/unicode.py as manifest items: valid texts give the files of
    Model.synthesize, lone surrogates (JSON escapes) are bad lines naming the field."""
    items = [{"id": f"u-{i}", "text": text, "speaker": "ryan", "seed": i, "max_new_tokens": 6}
             for i, text in enumerate(VALID.values())]
    bad = [{"id": f"bad-{i}", "text": text, "speaker": "ryan"} for i, text in enumerate(INVALID.values())]
    manifest = write_manifest(tmp_path / "corpus.jsonl", [*items, *bad])  # json.dumps escapes surrogates
    run = batch_cli(manifest, "-m", cv_path, "--output-dir", tmp_path / "out", "-t", "2", "-q", cache=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    for line in range(len(items) + 1, len(items) + len(bad) + 1):
        assert f"corpus.jsonl: line {line}: text is not valid Unicode: lone surrogate" in run.stderr
    expected = expected_files(qtts.Model(cv_path, n_threads=2), items, tmp_path, tmp_path / "expected")
    assert files_of(tmp_path / "out") == expected


def test_clones_and_voice_files(base_path: Path, tmp_path: Path) -> None:
    model = qtts.Model(base_path, n_threads=2, voice_cache=False)
    items = base_items(tmp_path, model)
    manifest = write_manifest(tmp_path / "clones.jsonl", items)
    run = batch_cli(manifest, "-m", base_path, "--output-dir", tmp_path / "out", "-t", "2", cache=tmp_path / "c")
    assert run.returncode == 0, run.stderr
    assert files_of(tmp_path / "out") == expected_files(model, items, tmp_path, tmp_path / "expected")
    # one encoding per distinct reference: ref.wav (ICL), ref2.wav (x-vector only)
    assert len(list((tmp_path / "c" / "voices").rglob("*.qvoice"))) == 2


def test_voice_design_items(gguf_dir: Path, tmp_path: Path) -> None:
    vd = gguf_dir / "tiny_voice_design-f32.gguf"
    items = [{"id": "calm", "text": "A calm voice speaks.", "instruct": "A calm, low voice.", "seed": 21,
              "max_new_tokens": 10},
             {"id": "bright", "text": "A bright one.", "instruct": "Bright and quick.", "seed": 22,
              "language": "english", "max_new_tokens": 10}]
    manifest = write_manifest(tmp_path / "vd.jsonl", items)
    run = batch_cli(manifest, "-m", vd, "--output-dir", tmp_path / "out", "-t", "2", cache=tmp_path)
    assert run.returncode == 0, run.stderr
    model = qtts.Model(vd, n_threads=2)
    assert files_of(tmp_path / "out") == expected_files(model, items, tmp_path, tmp_path / "expected")


def test_retry_failed(base_path: Path, tmp_path: Path) -> None:
    import soundfile

    from tests.fixtures.bulk import clip

    (tmp_path / "ref.wav").write_bytes(b"not audio")
    item = {"id": "x", "text": "Retry me.", "ref_audio": "ref.wav", "x_vector_only_mode": True, "seed": 3,
            "max_new_tokens": 8}
    manifest = write_manifest(tmp_path / "m.jsonl", [item])
    args = (manifest, "-m", base_path, "--output-dir", tmp_path / "out", "-t", "1")
    run = batch_cli(*args, cache=tmp_path)
    assert run.returncode == 1 and "x: " in run.stderr and "Traceback" not in run.stderr
    soundfile.write(tmp_path / "ref.wav", clip(24000, 3), 24000)
    run = batch_cli(*args, cache=tmp_path)  # a failed item is not retried unless asked
    assert run.returncode == 1 and "1 failed before (--retry-failed retries them)" in run.stderr
    assert len(results(tmp_path / "out")) == 1
    run = batch_cli(*args, "--retry-failed", cache=tmp_path)
    assert run.returncode == 0, run.stderr
    recs = results(tmp_path / "out")
    assert [r["error"] is None for r in recs] == [False, True]
    assert (tmp_path / "out" / "x.wav").exists()


def test_kill_and_resume(cv_path: Path, tmp_path: Path) -> None:
    """SIGKILL mid-run, then the same command: every item once, complete, no partial files."""
    n = 6
    items = [{"id": f"k{i}", "text": f"Item number {i}.", "speaker": "ryan", "seed": i, "min_new_tokens": 80,
              "max_new_tokens": 81, "frame_budget": "none"} for i in range(n)]
    manifest = write_manifest(tmp_path / "m.jsonl", items)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "qtts.cli", "batch", str(manifest), "-m", str(cv_path), "--output-dir", str(out),
           "-t", "1", "--max-batch", "1", "-q"]
    proc = subprocess.Popen(cmd, env={**os.environ, "QTTS_CACHE": str(tmp_path)}, stderr=subprocess.PIPE)
    log = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 2:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(results(out))
    assert 2 <= killed_at < n, "the run was not killed midway"
    with open(log, "a") as f:  # a line cut short by the kill, and a partial file of a dead writer
        f.write('{"id": "k5", "file": "k5.wav", "err')
    (out / "k5.wav.999999999.partial").write_bytes(b"RIFF")
    run = subprocess.run(cmd, env={**os.environ, "QTTS_CACHE": str(tmp_path)}, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    recs = results_lenient(log)
    ok = [r["id"] for r in recs if r["error"] is None]
    assert sorted(ok) == sorted(x["id"] for x in items)  # every item succeeded exactly once
    for r in recs:
        assert sf.info(str(out / r["file"])).frames == r["samples"] == 80 * 1920
    assert not list(out.glob("*.partial"))


def _children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (read from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_parent_leaves_no_workers(cv_path: Path, tmp_path: Path, sig: signal.Signals) -> None:
    """`--jobs 2` killed mid-run: its workers and multiprocessing's resource tracker are gone
    (soon: the wait is a hang guard; left behind, they would run for the rest of the batch), and
    the same command then finishes the run."""
    n = 8
    items = [{"id": f"w{i}", "text": f"Item number {i}.", "speaker": "ryan", "seed": i, "min_new_tokens": 80,
              "max_new_tokens": 81, "frame_budget": "none"} for i in range(n)]
    manifest = write_manifest(tmp_path / "m.jsonl", items)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "qtts.cli", "batch", str(manifest), "-m", str(cv_path), "--output-dir", str(out),
           "-t", "2", "--jobs", "2", "--max-batch", "1", "-q"]
    env = {**os.environ, "QTTS_CACHE": str(tmp_path)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    log = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count("\n") >= 1:
            break
        time.sleep(0.01)
    children = _children(proc.pid)
    assert len(children) >= 3, children  # two workers and the resource tracker
    proc.send_signal(sig)
    proc.wait(30)
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in children if _alive(p)], f"alive 60 s after {sig.name}"
    assert "Traceback" not in proc.stderr.read().decode()
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
    assert 1 <= len(results_lenient(log)) < n, "the run was not killed midway"
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    recs = results_lenient(log)
    assert sorted(r["id"] for r in recs if r["error"] is None) == sorted(x["id"] for x in items)
    for r in recs:
        assert sf.info(str(out / r["file"])).frames == r["samples"] == 80 * 1920
    assert not list(out.glob("*.partial"))


def test_stop_pool_returns_after_a_result_cut_short() -> None:
    """What a worker killed while sending a chunk's audio leaves in the result pipe, a message
    header and part of its bytes: stop_pool still lets the executor shut down (its manager thread
    would otherwise wait in recv() for the rest for ever; seen once as a SIGTERMed `batch --jobs 2`
    that never exited)."""
    import multiprocessing
    import struct
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from qtts.bulk.local import stop_pool

    before = set(multiprocessing.active_children())
    ex = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    future = ex.submit(time.sleep, 60)
    workers = set(multiprocessing.active_children()) - before
    assert len(workers) == 1
    os.write(ex._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    deadline = time.monotonic() + 60  # the manager thread reads the header and the bytes, then waits for the rest
    while ex._result_queue._reader.poll() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not ex._result_queue._reader.poll(), "the manager thread did not read the cut-short result"
    stop_pool(ex, workers)
    shutdown = threading.Thread(target=ex.shutdown, kwargs={"wait": True, "cancel_futures": True}, daemon=True)
    shutdown.start()
    shutdown.join(120)  # a hang guard
    assert not shutdown.is_alive(), "shutdown still waits on the cut-short result"
    assert not any(p.is_alive() for p in workers)
    with pytest.raises(BrokenProcessPool):
        future.result(timeout=5)


def results_lenient(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


MANIFEST_CASES = [
    ('{"id": "a", "text": "x", "seed": "1"}', "seed must be an integer"),
    ('{"id": "a", "text": "x", "top_p": 2}', "top_p"),
    ('{"id": "a"}', "missing field 'text'"),
    ('{"text": "x"}', "missing field 'id'"),
    ('{"id": "a", "text": "  "}', "text is empty"),
    ('{"id": "a/b", "text": "x"}', "cannot name a file"),
    ('{"id": ".hidden", "text": "x"}', "cannot name a file"),
    ('{"id": "a", "text": "x", "voice": "nope.qvoice"}', "no such file"),
    ('{"id": "a", "text": "x", "ref_text": "t"}', "ref_text goes with ref_audio"),
    ('{"id": "a", "text": "x", "x_vector_only_mode": 1}', "x_vector_only_mode must be True or False, got int 1"),
    ('[1, 2]', "expected a JSON object"),
    ('{"id": "a", "text": "x", "frame_budget": 0}', "frame_budget"),
    ('{"id": "a", "text": "x \\ud800 y"}', "text is not valid Unicode: lone surrogate"),
    ('{"id": "a", "text": "x", "speaker": "\\udc80"}', "speaker is not valid Unicode"),
]


@pytest.mark.parametrize("line,reason", MANIFEST_CASES)
def test_manifest_line_errors(tmp_path: Path, line: str, reason: str) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"id": "ok", "text": "fine"}\n\n' + line + "\n")
    m = read_manifest(p)
    assert [i.id for i in m.items] == ["ok"]
    assert len(m.errors) == 1 and m.errors[0].line == 3 and reason in m.errors[0].reason


def test_manifest_parsing(tmp_path: Path) -> None:
    (tmp_path / "v.qvoice").write_bytes(b"")
    p = tmp_path / "m.data"  # no telling extension: the content decides
    p.write_bytes(b'\xef\xbb\xbf{"id": 7, "text": "a", "voice": "v.qvoice", "top_k": 5.0, "frame_budget": "none"}\n'
                  b'{"id": "b", "text": "b", "seed": null, "language": "german"}\n\xff\n')
    m = read_manifest(p, defaults={"seed": 9, "speaker": "ryan"})
    assert m.format == "jsonl" and [str(e) for e in m.errors] == ["line 3: not valid UTF-8 (byte 0xff at offset 0)"]
    a, b = m.items
    assert (a.id, a.voice, a.sampling, a.frame_budget, a.seed) == ("7", str(tmp_path / "v.qvoice"), {"top_k": 5},
                                                                    None, 9)
    assert (b.seed, b.speaker, b.language, b.voice) == (9, "ryan", "german", None)
    with pytest.raises(FileNotFoundError, match="voice"):  # the default voice applies where the item has none
        parse_item({"id": "c", "text": "c"}, 1, tmp_path, {"voice": "/elsewhere.qvoice"})
    text = tmp_path / "lines"
    text.write_text("one\n\n{not json}\n")
    assert [(i.id, i.text) for i in read_manifest(text).items] == [("1", "one"), ("3", "{not json}")]


def test_progress_bar_on_a_terminal(cv_case: dict[str, Any], cv_path: Path) -> None:
    from tests.qtts.cli.test_cli_progress import _cli_tty_stderr

    out = cv_case["root"] / "tty"
    rc, shown = _cli_tty_stderr("batch", str(cv_case["manifest"]), "-m", str(cv_path), "--output-dir", str(out),
                                "-t", "1")
    assert rc == 1 and "synthesizing" in shown and "7/7" in shown and "h audio" in shown and "audio s/s" in shown
    assert "7 done, 0 skipped (done before), 0 failed" in shown
    rc, shown = _cli_tty_stderr("batch", str(cv_case["manifest"]), "-m", str(cv_path), "--output-dir", str(out),
                                "-q", "--retry-failed")
    assert rc == 1 and "synthesizing" not in shown and "line 3: bad JSON" in shown


def test_batch_device_flags_reach_every_worker(cv_path: Path, tmp_path: Path) -> None:
    """batch takes speak's --device, --precision and --no-huge-pages, and its workers load with them."""
    from qtts.cli import build_parser
    from qtts.cli.batch import _runner

    manifest = write_manifest(tmp_path / "m.jsonl", [{"id": "a", "text": "Hi.", "speaker": "ryan"}])
    args = build_parser().parse_args(["batch", str(manifest), "-m", str(cv_path), "--output-dir", str(tmp_path / "o"),
                                      "--device", "cpu", "--precision", "exact", "--no-huge-pages"])
    spec = _runner(args).spec
    assert (spec.options.device, spec.options.precision, spec.options.huge_pages) == ("cpu", "exact", False)
    m = spec.load()
    assert (m.device, m.precision) == ("CPU", "exact")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["batch", str(manifest), "-m", str(cv_path), "--output-dir", "o",
                                   "--precision", "tf32"])
