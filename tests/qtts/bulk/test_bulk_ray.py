"""Bulk synthesis on Ray: `qtts-cli batch --ray` gives the files of the local run (both
Model.synthesize's), and qtts.ray.Synthesizer works as a plain map_batches callable. One local Ray
instance (2 CPUs) serves the module: the command joins it with --address."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.runtime.aligner.subtitles import to_json
from tests.fixtures.bulk import CV_ITEMS, base_items, batch_cli, expected_files, files_of, good, results, write_manifest


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def test_cli_ray_same_files(gguf_dir: Path, ray_address: str, tmp_path: Path) -> None:
    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    manifest = write_manifest(tmp_path / "items.jsonl", CV_ITEMS)
    expected = expected_files(qtts.Model(cv, n_threads=1), good(CV_ITEMS), tmp_path, tmp_path / "expected")
    run = batch_cli(manifest, "-m", cv, "--output-dir", tmp_path / "out", "--ray", "--address", ray_address,
                    "--jobs", "2", "-t", "2", "--max-batch", "2", "--json", cache=tmp_path)
    assert run.returncode == 1 and "line 3: bad JSON" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert json.loads(run.stdout)["done"] == 7
    assert files_of(tmp_path / "out") == expected
    assert all(r["error"] is None and r["seed"] is not None for r in results(tmp_path / "out"))
    # resume applies: nothing is left to do
    run = batch_cli(manifest, "-m", cv, "--output-dir", tmp_path / "out", "--ray", "--address", ray_address,
                    "--json", cache=tmp_path)
    assert json.loads(run.stdout)["skipped"] == 7 and len(results(tmp_path / "out")) == 7


def test_cli_ray_runs_the_load_options_given(gguf_dir: Path, ray_address: str, tmp_path: Path) -> None:
    """`batch --ray --ops portable --precision exact` gives the files of a local model loaded
    so (the actors once loaded at the defaults whatever the flags said)."""
    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    items = good(CV_ITEMS)[:3]
    manifest = write_manifest(tmp_path / "items.jsonl", items)
    local = qtts.Model(cv, n_threads=1, ops="portable", precision="exact")
    run = batch_cli(manifest, "-m", cv, "--output-dir", tmp_path / "out", "--ray", "--address", ray_address,
                    "--jobs", "1", "-t", "1", "--ops", "portable", "--precision", "exact", "-q", cache=tmp_path)
    assert run.returncode == 0, run.stderr
    assert files_of(tmp_path / "out") == expected_files(local, items, tmp_path, tmp_path / "expected")
    native = expected_files(qtts.Model(cv, n_threads=1), items, tmp_path, tmp_path / "native")
    assert native != files_of(tmp_path / "out"), "the paths agree to the bit here: the test shows nothing"


def test_cli_ray_clones(gguf_dir: Path, ray_address: str, tmp_path: Path) -> None:
    base = gguf_dir / "tiny_base-f32.gguf"
    model = qtts.Model(base, n_threads=1, voice_cache=False)
    items = base_items(tmp_path, model)
    manifest = write_manifest(tmp_path / "clones.jsonl", items)
    run = batch_cli(manifest, "-m", base, "--output-dir", tmp_path / "out", "--ray", "--address", ray_address,
                    "--jobs", "1", "-t", "1", "-q", cache=tmp_path / "c")
    assert run.returncode == 0, run.stderr
    assert files_of(tmp_path / "out") == expected_files(model, items, tmp_path, tmp_path / "expected")


def test_synthesizer_map_batches(gguf_dir: Path, ray_address: str) -> None:
    import ray

    import qtts.ray

    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    rows = [{"id": f"r{i}", "text": f"Row {i} speaks.", "speaker": "ryan", "seed": i} for i in range(4)]
    rows += [{"id": "bad-speaker", "text": "x", "speaker": "nobody", "seed": 1},
             {"id": "bad-seed", "text": "x", "speaker": "ryan", "seed": -1}]
    ds = ray.data.from_items(rows).map_batches(
        qtts.ray.Synthesizer, fn_constructor_kwargs={"model": str(cv), "n_threads": 1, "max_new_tokens": 10},
        concurrency=2, batch_size=4, num_cpus=1)
    out = {r["id"]: r for r in ds.take_all()}
    assert set(out) == {r["id"] for r in rows}
    assert set(out["r0"]) == {"id", "audio", "sample_rate", "frames", "stop_reason", "seed", "timings", "words",
                              "error"}
    assert out["r0"]["words"] is None
    model = qtts.Model(cv, n_threads=1)
    for r in rows[:4]:
        got = out[r["id"]]
        want = model.synthesize(r["text"], speaker="ryan", seed=r["seed"], max_new_tokens=10)
        assert got["error"] is None and got["sample_rate"] == 24000 and got["stop_reason"] == want.stop_reason
        assert got["audio"].dtype == np.float32 and np.array_equal(got["audio"], want.samples)
        assert got["frames"] == len(want.codes) and json.loads(got["timings"])["frames"] == len(want.codes)
    assert "unknown speaker 'nobody'" in out["bad-speaker"]["error"] and len(out["bad-speaker"]["audio"]) == 0
    assert "seed must be in [0, 2**64)" in out["bad-seed"]["error"]


def test_cli_ray_writes_words(gguf_dir: Path, aligner_gguf: dict[str, Path], ray_address: str,
                              tmp_path: Path) -> None:
    """--timestamps on Ray: each actor loads the aligner (the load options carried whole), and the
    words files are those of the local model."""
    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    items = good(CV_ITEMS)[:2]
    manifest = write_manifest(tmp_path / "items.jsonl", items)
    run = batch_cli(manifest, "-m", cv, "--output-dir", tmp_path / "out", "--ray", "--address", ray_address,
                    "--jobs", "1", "-t", "1", "--timestamps", "json", "--aligner", aligner_gguf["f32"], "-q",
                    cache=tmp_path)
    assert run.returncode == 0, run.stderr
    with qtts.load(cv, n_threads=1, aligner=aligner_gguf["f32"]) as m:
        want = {x["id"]: to_json(m.synthesize(x["text"], word_timestamps=True,
                                              **{k: v for k, v in x.items() if k not in ("id", "text")}).words)
                for x in items}
    assert files_of(tmp_path / "out", "json") == {k: v.encode() for k, v in want.items()}
